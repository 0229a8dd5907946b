// Example `restart` plugin in Go: restart pods that have run longer than a maximum age.
//
// Long-running proxies and apps accumulate state (leaked memory, stale connections, certificates
// loaded at start). This policy restarts every pod of the page whose start time is older than
// `maxAge`, like the descheduler's PodLifeTime, unless the pod is annotated with the exempt
// annotation set to "true", is terminating, or has finished.
//
// Settings (all optional): {"maxAge": "168h", "exemptAnnotation": "example.com/max-age-exempt"}.
// maxAge is a Go duration of at least one minute. The current time is the WASI wall clock.
//
// The policy (this file) is plain Go with unit tests (`go test ./...`); plugin.go hands it to
// the SDK's restart package (plugins/sdk-go), which holds the canonical ABI glue.
package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"example.com/wasmop/sdk"
	"example.com/wasmop/sdk/restart"
)

// Settings of the plugin, from its entry in the wasmop-plugins ConfigMap.
type Settings struct {
	MaxAge           time.Duration
	ExemptAnnotation string
}

// PluginError is a decision the plugin refuses to make, with the offending field.
type PluginError = sdk.PluginError

// ParseSettings reads the settings JSON object; absent keys take their defaults.
func ParseSettings(text string) (Settings, *PluginError) {
	s := Settings{MaxAge: 168 * time.Hour, ExemptAnnotation: "example.com/max-age-exempt"}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(text), &raw); err != nil || raw == nil {
		return s, fail("settings must be a JSON object", "settings")
	}
	for key, value := range raw {
		var str string
		switch key {
		case "maxAge":
			if json.Unmarshal(value, &str) != nil {
				return s, fail("maxAge must be a duration string such as \"168h\"", "settings.maxAge")
			}
			d, err := time.ParseDuration(str)
			if err != nil || d < time.Minute {
				return s, fail(fmt.Sprintf("maxAge %q must be a duration of at least 1m, e.g. \"168h\"", str), "settings.maxAge")
			}
			s.MaxAge = d
		case "exemptAnnotation":
			if json.Unmarshal(value, &str) != nil || str == "" || strings.ContainsAny(str, " \t\n") {
				return s, fail("exemptAnnotation must be an annotation key", "settings.exemptAnnotation")
			}
			s.ExemptAnnotation = str
		default:
			return s, fail(fmt.Sprintf("unknown settings key %q; the keys are maxAge and exemptAnnotation", key), "settings")
		}
	}
	return s, nil
}

// Pod is the part of a core/v1 Pod this policy reads.
type Pod struct {
	Metadata struct {
		Name              string            `json:"name"`
		Namespace         string            `json:"namespace"`
		Annotations       map[string]string `json:"annotations"`
		CreationTimestamp *time.Time        `json:"creationTimestamp"`
		DeletionTimestamp *time.Time        `json:"deletionTimestamp"`
	} `json:"metadata"`
	Status struct {
		Phase     string     `json:"phase"`
		StartTime *time.Time `json:"startTime"`
	} `json:"status"`
}

// Decision for one pod.
type Decision = restart.Decision

func fail(message, field string) *PluginError { return &PluginError{Message: message, Field: field} }

func decide(restart bool, reason string) Decision { return Decision{Restart: restart, Reason: reason} }

// Decide judges one pod at time `now`.
func Decide(s Settings, p *Pod, now time.Time) Decision {
	name := p.Metadata.Namespace + "/" + p.Metadata.Name
	switch {
	case p.Metadata.Annotations[s.ExemptAnnotation] == "true":
		return decide(false, fmt.Sprintf("%s: exempt (%s=true)", name, s.ExemptAnnotation))
	case p.Metadata.DeletionTimestamp != nil:
		return decide(false, name+": terminating")
	case p.Status.Phase == "Succeeded" || p.Status.Phase == "Failed":
		return decide(false, fmt.Sprintf("%s: finished (%s)", name, p.Status.Phase))
	}
	started := p.Status.StartTime
	if started == nil {
		started = p.Metadata.CreationTimestamp
	}
	if started == nil {
		return decide(false, name+": no start time yet")
	}
	if started.After(now) {
		return decide(false, fmt.Sprintf("%s: start time %s is in the future", name, started.Format(time.RFC3339)))
	}
	age := now.Sub(*started).Truncate(time.Second)
	if age > s.MaxAge {
		return decide(true, fmt.Sprintf("%s: running for %s, longer than maxAge %s", name, age, s.MaxAge))
	}
	return decide(false, fmt.Sprintf("%s: running for %s of maxAge %s", name, age, s.MaxAge))
}

// Evaluate decides a page of pods (a JSON array of Pod objects), in page order.
func Evaluate(settingsJSON, podsJSON string, now time.Time) ([]Decision, *PluginError) {
	s, perr := ParseSettings(settingsJSON)
	if perr != nil {
		return nil, perr
	}
	var pods []Pod
	if err := json.Unmarshal([]byte(podsJSON), &pods); err != nil {
		return nil, fail("pods must be a JSON array of Pod objects: "+err.Error(), "request.pods")
	}
	out := make([]Decision, len(pods))
	for i := range pods {
		out[i] = Decide(s, &pods[i], now)
	}
	return out, nil
}
