package main

import (
	"strings"
	"testing"
	"time"
)

func TestOldPodsRestartAndExemptOnesDoNot(t *testing.T) {
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	pods := `[
	  {"metadata": {"name": "old", "namespace": "shop"}, "status": {"phase": "Running", "startTime": "2026-11-10T12:00:00Z"}},
	  {"metadata": {"name": "young", "namespace": "shop"}, "status": {"phase": "Running", "startTime": "2026-11-22T09:00:00Z"}},
	  {"metadata": {"name": "pinned", "namespace": "shop", "annotations": {"example.com/max-age-exempt": "true"}},
	   "status": {"phase": "Running", "startTime": "2026-01-01T00:00:00Z"}},
	  {"metadata": {"name": "done", "namespace": "shop", "creationTimestamp": "2026-01-01T00:00:00Z"}, "status": {"phase": "Succeeded"}},
	  {"metadata": {"name": "skewed", "namespace": "shop"}, "status": {"phase": "Running", "startTime": "2999-01-01T00:00:00Z"}}
	]`
	got, err := Evaluate(`{"maxAge": "72h"}`, pods, now)
	if err != nil {
		t.Fatal(err)
	}
	want := []bool{true, false, false, false, false}
	for i, d := range got {
		if d.Restart != want[i] {
			t.Errorf("pod %d: restart=%v (%s), want %v", i, d.Restart, d.Reason, want[i])
		}
	}
	if !strings.Contains(got[0].Reason, "running for 288h0m0s, longer than maxAge 72h0m0s") {
		t.Errorf("reason: %s", got[0].Reason)
	}
	if !strings.Contains(got[4].Reason, "in the future") {
		t.Errorf("reason: %s", got[4].Reason)
	}
}

func TestSettingsErrorsNameTheField(t *testing.T) {
	for text, field := range map[string]string{
		`[]`:                       "settings",
		`{"maxAge": "30s"}`:        "settings.maxAge",
		`{"maxAge": 5}`:            "settings.maxAge",
		`{"exemptAnnotation": ""}`: "settings.exemptAnnotation",
		`{"colour": "red"}`:        "settings",
	} {
		if _, err := ParseSettings(text); err == nil || err.Field != field {
			t.Errorf("%s: got %v, want an error at %s", text, err, field)
		}
	}
	if s, err := ParseSettings(`{}`); err != nil || s.MaxAge != 168*time.Hour {
		t.Errorf("defaults: %+v %v", s, err)
	}
}

func TestPodsMustBeAList(t *testing.T) {
	if _, err := Evaluate(`{}`, `{"kind": "Pod"}`, time.Now()); err == nil || err.Field != "request.pods" {
		t.Errorf("got %v", err)
	}
}
