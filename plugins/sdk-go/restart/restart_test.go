package restart

import (
	"testing"

	"example.com/wasmop/sdk"
)

func TestDecisionsLayout(t *testing.T) {
	m := &sdk.SliceMemory{}
	area := LowerEvaluate(m, []Decision{{true, "old"}, {false, "young enough"}}, nil)
	if m.U8(area) != 0 {
		t.Fatalf("tag %d, want 0 (ok)", m.U8(area))
	}
	list, n := m.U32(area+4), m.U32(area+8)
	if n != 2 || list%4 != 0 {
		t.Fatalf("list at %d, length %d", list, n)
	}
	if m.U8(list) != 1 || m.String(list+4) != "old" {
		t.Errorf("decision 0: restart %d, %q", m.U8(list), m.String(list+4))
	}
	if m.U8(list+12) != 0 || m.String(list+16) != "young enough" {
		t.Errorf("decision 1 (12 bytes on): restart %d, %q", m.U8(list+12), m.String(list+16))
	}
}

func TestEvaluateErrorLayout(t *testing.T) {
	m := &sdk.SliceMemory{}
	area := LowerEvaluate(m, nil, &sdk.PluginError{Message: "not a list", Field: "request.pods"})
	if m.U8(area) != 1 || m.String(area+4) != "not a list" || m.String(area+16) != "request.pods" {
		t.Errorf("tag %d, %q at %q", m.U8(area), m.String(area+4), m.String(area+16))
	}
}

func TestAnEmptyPageIsAnEmptyList(t *testing.T) {
	m := &sdk.SliceMemory{}
	area := LowerEvaluate(m, []Decision{}, nil)
	if m.U8(area) != 0 || m.U32(area+8) != 0 {
		t.Errorf("tag %d, length %d", m.U8(area), m.U32(area+8))
	}
}
