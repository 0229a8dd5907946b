package dr

import (
	"testing"

	"example.com/wasmop/sdk"
)

func TestDecisionLayout(t *testing.T) {
	m := &sdk.SliceMemory{}
	area := LowerCheck(m, Decision{State: Passive, Action: Takeover, Reason: "expired"}, nil)
	if m.U8(area) != 0 || m.U8(area+4) != 1 || m.U8(area+5) != 3 {
		t.Errorf("tag %d, state %d @4 (want 1 = passive), action %d @5 (want 3 = takeover)",
			m.U8(area), m.U8(area+4), m.U8(area+5))
	}
	if m.String(area+8) != "expired" {
		t.Errorf("reason @8: %q", m.String(area+8))
	}
}

func TestCheckErrorLayout(t *testing.T) {
	m := &sdk.SliceMemory{}
	area := LowerCheck(m, Decision{}, &sdk.PluginError{Message: "bad", Field: "settings"})
	if m.U8(area) != 1 || m.String(area+4) != "bad" || m.String(area+16) != "settings" {
		t.Errorf("tag %d, %q at %q", m.U8(area), m.String(area+4), m.String(area+16))
	}
}

func TestRequestLiftsWithAndWithoutALease(t *testing.T) {
	m := &sdk.SliceMemory{}
	strs := m.Alloc(24, 4)
	sdk.PutString(m, strs, "eu-1")
	sdk.PutString(m, strs+8, "us-1")
	sdk.PutString(m, strs+16, "Created at 1")
	ptr := func(at uint32) (uint32, uint32) { return m.U32(at), m.U32(at + 4) }
	idP, idN := ptr(strs)
	ownP, ownN := ptr(strs + 8)
	notesP, notesN := ptr(strs + 16)

	r := LiftRequest(m, idP, idN, 2000, 1, ownP, ownN, 1500, notesP, notesN, 15, 3, 100, 60)
	if r.Identity != "eu-1" || r.Now != 2000 || r.WaitTimeSeconds != 15 || r.FailureThreshold != 3 ||
		r.StartedAt != 100 || r.WarmupSeconds != 60 {
		t.Errorf("%+v", r)
	}
	if r.Lease == nil || *r.Lease != (Lease{Owner: "us-1", UpdatedTime: 1500, Notes: "Created at 1"}) {
		t.Errorf("lease %+v", r.Lease)
	}
	// Without a lease the case's slots hold nothing the plugin may read.
	if r := LiftRequest(m, idP, idN, 2000, 0, 0, 0, 0, 0, 0, 15, 3, 100, 60); r.Lease != nil {
		t.Errorf("lease %+v, want none", r.Lease)
	}
}

func TestCaseNames(t *testing.T) {
	if Active.String() != "active" || Passive.String() != "passive" || None.String() != "none" ||
		Create.String() != "create" || Renew.String() != "renew" || Takeover.String() != "takeover" {
		t.Error("case names")
	}
}
