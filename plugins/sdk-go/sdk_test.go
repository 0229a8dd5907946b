package sdk

import "testing"

func TestInfoLayout(t *testing.T) {
	m := &SliceMemory{}
	area := LowerInfo(m, PluginInfo{Name: "max-age-restart", Version: "0.1.0", Hook: HookRestart})
	if area%4 != 0 {
		t.Fatalf("area %d is not 4-aligned", area)
	}
	if got := m.String(area); got != "max-age-restart" {
		t.Errorf("name @0: %q", got)
	}
	if got := m.String(area + 8); got != "0.1.0" {
		t.Errorf("version @8: %q", got)
	}
	if got := m.U8(area + 16); got != 2 {
		t.Errorf("hook @16: %d, want 2 (restart)", got)
	}
}

func TestUnitResultLayout(t *testing.T) {
	m := &SliceMemory{}
	if ok := LowerUnitResult(m, nil); m.U8(ok) != 0 {
		t.Errorf("ok tag: %d", m.U8(ok))
	}
	withField := LowerUnitResult(m, &PluginError{Message: "too short", Field: "settings.maxAge"})
	if m.U8(withField) != 1 || m.String(withField+4) != "too short" {
		t.Errorf("error case: tag %d, message %q", m.U8(withField), m.String(withField+4))
	}
	if m.U8(withField+12) != 1 || m.String(withField+16) != "settings.maxAge" {
		t.Errorf("field: tag %d, %q", m.U8(withField+12), m.String(withField+16))
	}
	noField := LowerUnitResult(m, &PluginError{Message: "no"})
	if m.U8(noField+12) != 0 {
		t.Errorf("absent field: tag %d, want 0 (none)", m.U8(noField+12))
	}
}

func TestStringsRoundTripAndEmptyOnes(t *testing.T) {
	m := &SliceMemory{}
	area := m.Alloc(16, 4)
	PutString(m, area, "héllo")
	PutString(m, area+8, "")
	if m.String(area) != "héllo" || m.U32(area+4) != 6 {
		t.Errorf("string: %q, len %d", m.String(area), m.U32(area+4))
	}
	if m.String(area+8) != "" || m.U32(area+12) != 0 {
		t.Errorf("empty string: len %d", m.U32(area+12))
	}
}

func TestSliceMemoryAligns(t *testing.T) {
	m := &SliceMemory{}
	a := m.Alloc(3, 1)
	b := m.Alloc(4, 8)
	if a != 8 || b != 16 {
		t.Errorf("addresses %d, %d; want 8, 16", a, b)
	}
}

func TestPluginErrorNamesItsField(t *testing.T) {
	e := &PluginError{Message: "must be positive", Field: "settings.maxAge"}
	if e.Error() != "settings.maxAge: must be positive" {
		t.Errorf("%q", e.Error())
	}
}
