// {{name}}: a restart plugin. No pod restarts unless the settings say {"restart": true}: a
// starting point to replace with a policy that compares each pod with the desired proxy state.
//
// The policy (this file) is plain Go with unit tests (`go test ./...`); plugin.go hands it to
// the SDK's restart package.
package main

import (
	"encoding/json"
	"fmt"

	"example.com/wasmop/sdk"
	"example.com/wasmop/sdk/restart"
)

// Settings of the plugin, from its registry entry: {"restart": bool}.
type Settings struct {
	Restart bool
}

// ParseSettings reads the settings JSON object; an absent restart is false.
func ParseSettings(text string) (Settings, *sdk.PluginError) {
	var s Settings
	var settings map[string]json.RawMessage
	if json.Unmarshal([]byte(text), &settings) != nil || settings == nil {
		return s, &sdk.PluginError{Message: "settings must be a JSON object", Field: "settings"}
	}
	for key, value := range settings {
		if key != "restart" {
			return s, &sdk.PluginError{
				Message: fmt.Sprintf("unknown settings key %q; the key is restart", key),
				Field:   "settings",
			}
		}
		if json.Unmarshal(value, &s.Restart) != nil {
			return s, &sdk.PluginError{
				Message: fmt.Sprintf("restart must be true or false, got %s", value),
				Field:   "settings.restart",
			}
		}
	}
	return s, nil
}

// Pod is the part of a core/v1 Pod this policy reads.
type Pod struct {
	Metadata struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
}

// Evaluate decides a page of pods (a JSON array of Pod objects): one decision per pod, in page
// order.
func Evaluate(s Settings, podsJSON string) ([]restart.Decision, *sdk.PluginError) {
	var pods []Pod
	if err := json.Unmarshal([]byte(podsJSON), &pods); err != nil || pods == nil {
		return nil, &sdk.PluginError{Message: "pods must be a JSON array of Pod objects", Field: "request.pods"}
	}
	out := make([]restart.Decision, len(pods))
	for i, p := range pods {
		out[i] = restart.Decision{
			Restart: s.Restart,
			Reason:  fmt.Sprintf("%s/%s: the settings' restart is %t", p.Metadata.Namespace, p.Metadata.Name, s.Restart),
		}
	}
	return out, nil
}
