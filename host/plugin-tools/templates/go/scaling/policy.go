// {{name}}: a scaling plugin. Every trigger gets the vote its settings name (up unless they say
// down): a starting point to replace with a policy that reads the trigger.
//
// The policy (this file) is plain Go with unit tests (`go test ./...`); plugin.go hands it to
// the SDK's scaling package.
package main

import (
	"encoding/json"
	"fmt"

	"example.com/wasmop/sdk"
	"example.com/wasmop/sdk/scaling"
)

// Settings of the plugin, from its registry entry: {"vote": "up" | "down"}.
type Settings struct {
	Vote scaling.Vote
}

// ParseSettings reads the settings JSON object; an absent vote is up.
func ParseSettings(text string) (Settings, *sdk.PluginError) {
	s := Settings{Vote: scaling.Up}
	var settings map[string]json.RawMessage
	if json.Unmarshal([]byte(text), &settings) != nil || settings == nil {
		return s, &sdk.PluginError{Message: "settings must be a JSON object", Field: "settings"}
	}
	for key, value := range settings {
		if key != "vote" {
			return s, &sdk.PluginError{
				Message: fmt.Sprintf("unknown settings key %q; the key is vote", key),
				Field:   "settings",
			}
		}
		var vote string
		json.Unmarshal(value, &vote)
		switch vote {
		case "up":
			s.Vote = scaling.Up
		case "down":
			s.Vote = scaling.Down
		default:
			return s, &sdk.PluginError{
				Message: fmt.Sprintf("vote must be \"up\" or \"down\", got %s", value),
				Field:   "settings.vote",
			}
		}
	}
	return s, nil
}

// Vote is the vote for one trigger.
func Vote(s Settings, r scaling.Request) scaling.TriggerVote {
	return scaling.TriggerVote{
		Vote:   s.Vote,
		Reason: fmt.Sprintf("%s trigger of %s: the settings' vote, %s", r.TriggerType, r.ElasticService, s.Vote),
	}
}
