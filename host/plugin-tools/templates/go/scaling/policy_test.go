package main

import (
	"strings"
	"testing"

	"example.com/wasmop/sdk/scaling"
)

func TestVotesAsTheSettingsSay(t *testing.T) {
	r := scaling.Request{ElasticService: "shop/reviews", TriggerType: "cron", Metadata: "{}"}
	up, _ := ParseSettings("{}")
	if v := Vote(up, r); v.Vote != scaling.Up || v.HasValue || !strings.Contains(v.Reason, "shop/reviews") {
		t.Errorf("%+v", v)
	}
	down, _ := ParseSettings(`{"vote": "down"}`)
	if v := Vote(down, r); v.Vote != scaling.Down {
		t.Errorf("%+v", v)
	}
}

func TestRefusesOtherSettingsWithTheirField(t *testing.T) {
	for text, field := range map[string]string{
		`{"vote": "sideways"}`: "settings.vote", `{"vote": 1}`: "settings.vote",
		`{"colour": 1}`: "settings", `[]`: "settings", `{`: "settings",
	} {
		if _, err := ParseSettings(text); err == nil || err.Field != field {
			t.Errorf("%s: %v, want an error at %s", text, err, field)
		}
	}
}
