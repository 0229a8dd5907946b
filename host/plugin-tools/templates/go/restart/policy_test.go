package main

import (
	"strings"
	"testing"
)

const pods = `[{"metadata": {"name": "a", "namespace": "shop"}}, {"metadata": {"name": "b", "namespace": "shop"}}]`

func TestOneDecisionPerPodAsTheSettingsSay(t *testing.T) {
	keep, _ := ParseSettings("{}")
	d, err := Evaluate(keep, pods)
	if err != nil || len(d) != 2 || d[0].Restart || d[1].Restart || !strings.HasPrefix(d[0].Reason, "shop/a: ") {
		t.Errorf("%+v %v", d, err)
	}
	all, _ := ParseSettings(`{"restart": true}`)
	if d, _ := Evaluate(all, pods); !d[0].Restart || !d[1].Restart {
		t.Errorf("%+v", d)
	}
	if d, err := Evaluate(all, "[]"); err != nil || len(d) != 0 {
		t.Errorf("an empty page: %+v %v", d, err)
	}
}

func TestRefusesWhatItCannotReadWithTheField(t *testing.T) {
	if _, err := Evaluate(Settings{}, "{}"); err == nil || err.Field != "request.pods" {
		t.Errorf("%v", err)
	}
	for text, field := range map[string]string{
		`{"restart": "yes"}`: "settings.restart", `{"colour": 1}`: "settings", `[]`: "settings",
	} {
		if _, err := ParseSettings(text); err == nil || err.Field != field {
			t.Errorf("%s: %v, want an error at %s", text, err, field)
		}
	}
}
