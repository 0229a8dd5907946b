package scaling

import (
	"testing"

	"example.com/wasmop/sdk"
)

func TestVoteLayout(t *testing.T) {
	m := &sdk.SliceMemory{}
	area := LowerVote(m, TriggerVote{Vote: Down, HasValue: true, Value: 0.2, Reason: "idle"}, nil)
	if area%8 != 0 {
		t.Fatalf("area %d is not 8-aligned", area)
	}
	if m.U8(area) != 0 || m.U8(area+8) != 1 {
		t.Errorf("tag %d, vote %d @8 (want 0, 1 = down)", m.U8(area), m.U8(area+8))
	}
	if m.U8(area+16) != 1 || m.F64(area+24) != 0.2 {
		t.Errorf("value: tag %d @16, %v @24", m.U8(area+16), m.F64(area+24))
	}
	if m.String(area+32) != "idle" {
		t.Errorf("reason @32: %q", m.String(area+32))
	}
}

func TestAVoteWithoutAValue(t *testing.T) {
	m := &sdk.SliceMemory{}
	area := LowerVote(m, TriggerVote{Vote: Up, Reason: "fixed"}, nil)
	if m.U8(area+8) != 0 || m.U8(area+16) != 0 || m.String(area+32) != "fixed" {
		t.Errorf("vote %d, value tag %d, reason %q", m.U8(area+8), m.U8(area+16), m.String(area+32))
	}
}

func TestVoteErrorSitsAtTheAlignedPayload(t *testing.T) {
	m := &sdk.SliceMemory{}
	area := LowerVote(m, TriggerVote{}, &sdk.PluginError{Message: "no query", Field: "request.metadata.query"})
	if m.U8(area) != 1 || m.String(area+8) != "no query" {
		t.Errorf("tag %d, message @8 %q", m.U8(area), m.String(area+8))
	}
	if m.U8(area+16) != 1 || m.String(area+20) != "request.metadata.query" {
		t.Errorf("field tag %d @16, %q @20", m.U8(area+16), m.String(area+20))
	}
}

func TestRequestLiftsFromFlatParameters(t *testing.T) {
	m := &sdk.SliceMemory{}
	area := m.Alloc(24, 4)
	sdk.PutString(m, area, "shop/reviews")
	sdk.PutString(m, area+8, "cron")
	sdk.PutString(m, area+16, `{"start":"0 8 * * *"}`)
	r := LiftRequest(m, m.U32(area), m.U32(area+4), m.U32(area+8), m.U32(area+12),
		m.U32(area+16), m.U32(area+20), 300, 1795424400000)
	want := Request{ElasticService: "shop/reviews", TriggerType: "cron",
		Metadata: `{"start":"0 8 * * *"}`, CooldownSeconds: 300, Now: 1795424400000}
	if r != want {
		t.Errorf("%+v", r)
	}
	if Up.String() != "up" || Down.String() != "down" {
		t.Errorf("%s %s", Up, Down)
	}
}
