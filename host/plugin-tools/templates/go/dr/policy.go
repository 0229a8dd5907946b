// {{name}}: a dr plugin. It follows the lease as the default plugin, dr-lease, does (README.md
// lists the rules): a starting point to change where your sites need it.
//
// The policy (this file) is plain Go with unit tests (`go test ./...`); plugin.go hands it to
// the SDK's dr package.
package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"example.com/wasmop/sdk"
	"example.com/wasmop/sdk/dr"
)

// HostKeys are the keys of the host's DR settings (docs/dr.md), which a dr entry's settings
// carry beside the plugin's own: the host checks them.
var HostKeys = []string{"backend", "leaseName", "waitTimeInSeconds", "failureThreshold",
	"warmupSeconds", "podIdentifier", "dynamoDB"}

// ParseSettings checks the settings JSON object: the host's keys only, for now.
func ParseSettings(text string) *sdk.PluginError {
	var settings map[string]json.RawMessage
	if json.Unmarshal([]byte(text), &settings) != nil || settings == nil {
		return &sdk.PluginError{Message: "settings must be a JSON object", Field: "settings"}
	}
	for key := range settings {
		if !slices.Contains(HostKeys, key) {
			return &sdk.PluginError{
				Message: fmt.Sprintf("unknown settings key %q; the keys are the host's DR keys, %s",
					key, strings.Join(HostKeys, ", ")),
				Field: "settings",
			}
		}
	}
	return nil
}

func decide(state dr.State, action dr.Action, reason string) dr.Decision {
	return dr.Decision{State: state, Action: action, Reason: reason}
}

// Check decides one tick, the first matching rule winning.
func Check(r dr.Request) (dr.Decision, *sdk.PluginError) {
	if r.WaitTimeSeconds == 0 || r.FailureThreshold == 0 {
		return dr.Decision{}, &sdk.PluginError{
			Message: "wait-time-seconds and failure-threshold must be at least 1", Field: "request",
		}
	}
	warming := r.Now-r.StartedAt < int64(r.WarmupSeconds)*1000
	expiryMs := int64(r.WaitTimeSeconds) * int64(r.FailureThreshold) * 1000
	l := r.Lease
	switch {
	case l == nil && warming:
		return decide(dr.Passive, dr.None, "no lease, warming up"), nil
	case l == nil:
		return decide(dr.Active, dr.Create, "no lease: creating it"), nil
	case l.Owner == dr.SkipLeasePod:
		return decide(dr.Passive, dr.None, "the owner is SKIP-LEASE-POD: every instance stays passive"), nil
	case warming:
		return decide(dr.Passive, dr.None, "warming up"), nil
	case l.Owner == r.Identity:
		return decide(dr.Active, dr.Renew, "holding the lease: renewing it"), nil
	case r.Now-l.UpdatedTime > expiryMs:
		return decide(dr.Active, dr.Takeover, fmt.Sprintf(
			"the lease of %s was renewed %d ms ago, more than %d ms: taking it over",
			l.Owner, r.Now-l.UpdatedTime, expiryMs)), nil
	}
	return decide(dr.Passive, dr.None, "the lease is held by "+l.Owner), nil
}
