package main

import (
	"testing"

	"example.com/wasmop/sdk/dr"
)

func tick(owner string, updatedAgoMs int64) dr.Request {
	r := dr.Request{Identity: "eu-1", Now: 1_000_000, WaitTimeSeconds: 15, FailureThreshold: 3}
	if owner != "" {
		r.Lease = &dr.Lease{Owner: owner, UpdatedTime: r.Now - updatedAgoMs}
	}
	return r
}

func TestFollowsTheLease(t *testing.T) {
	warming := tick("", 0)
	warming.WarmupSeconds = 2000
	cases := []struct {
		name   string
		r      dr.Request
		state  dr.State
		action dr.Action
	}{
		{"no lease", tick("", 0), dr.Active, dr.Create},
		{"own lease", tick("eu-1", 15_000), dr.Active, dr.Renew},
		{"a peer's, at the limit", tick("us-1", 45_000), dr.Passive, dr.None},
		{"a peer's, past it", tick("us-1", 45_001), dr.Active, dr.Takeover},
		{"manual switch", tick(dr.SkipLeasePod, 900_000), dr.Passive, dr.None},
		{"warming up", warming, dr.Passive, dr.None},
	}
	for _, c := range cases {
		d, err := Check(c.r)
		if err != nil || d.State != c.state || d.Action != c.action {
			t.Errorf("%s: %s %s (%q) %v, want %s %s", c.name, d.State, d.Action, d.Reason, err, c.state, c.action)
		}
	}
}

func TestTakesTheHostsKeysAndRefusesOthers(t *testing.T) {
	if err := ParseSettings(`{"backend": "k8s-lease", "waitTimeInSeconds": 5}`); err != nil {
		t.Error(err)
	}
	if err := ParseSettings(`{"colour": 1}`); err == nil || err.Field != "settings" {
		t.Errorf("%v", err)
	}
	zero := tick("", 0)
	zero.FailureThreshold = 0
	if _, err := Check(zero); err == nil || err.Field != "request" {
		t.Errorf("%v", err)
	}
}
