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

func TestErrorAtAnAlignedPayload(t *testing.T) {
	m := &SliceMemory{}
	area := m.Alloc(40, 8)
	PutErrorAt(m, area, 8, &PluginError{Message: "no", Field: "settings.vote"})
	if m.U8(area) != 1 || m.String(area+8) != "no" {
		t.Errorf("tag %d, message %q at @8", m.U8(area), m.String(area+8))
	}
	if m.U8(area+16) != 1 || m.String(area+20) != "settings.vote" {
		t.Errorf("field tag %d @16, field %q @20", m.U8(area+16), m.String(area+20))
	}
}

func TestScalarsAndStringsReadBack(t *testing.T) {
	m := &SliceMemory{}
	area := m.Alloc(24, 8)
	PutF64(m, area, 0.25)
	PutU32(m, area+8, 7)
	PutString(m, area+16, "shop/reviews")
	if m.F64(area) != 0.25 || U32(m, area+8) != 7 || U8(m, area+8) != 7 {
		t.Errorf("f64 %v, u32 %d", m.F64(area), U32(m, area+8))
	}
	if got := StringAt(m, area+16); got != "shop/reviews" {
		t.Errorf("string %q", got)
	}
}
