// Package scaling exports the scaler world of wasmop:plugin@0.1.0 for a Go plugin: register the
// plugin with Export from an init function of package main, and the package's //go:wasmexport
// functions (info, validate-settings, vote and their post-return functions) call it.
//
//	func init() { scaling.Export(scaler{}) }
//
// The world lets a plugin reach the hosts its registry entry grants over wasi:http; this package
// holds the world's exports only (the Go runtime's preview1 has no HTTP).
//
// Layouts (canonical ABI, wasm32; the shared ones are in package sdk):
//
//	vote params           settings, then the request's elastic-service, trigger-type, metadata
//	                      (ptr, len each), cooldown-seconds i32, now i64: ten values
//	result<trigger-vote, plugin-error>  tag u8 @0, payload @8 (trigger-vote holds an f64):
//	                      ok: vote u8 @8, value option tag u8 @16, f64 @24, reason @32;
//	                      error: plugin-error @8; size 40, align 8
package scaling

import "example.com/wasmop/sdk"

// Request is wasmop:plugin/scaling.trigger-request: one trigger of one ElasticService. Metadata
// is the trigger's metadata object as JSON; Now is Unix milliseconds.
type Request struct {
	ElasticService  string
	TriggerType     string
	Metadata        string
	CooldownSeconds uint32
	Now             int64
}

// Vote is wasmop:plugin/scaling.vote.
type Vote uint8

// The cases of Vote, in WIT order.
const (
	// Up: the service is in use; keep it at (or bring it back to) minTargetReplicas.
	Up Vote = iota
	// Down: the service is idle; it may go to zero once every trigger agrees.
	Down
)

// String is the case's WIT name: up or down.
func (v Vote) String() string {
	if v == Down {
		return "down"
	}
	return "up"
}

// TriggerVote is wasmop:plugin/scaling.trigger-vote: the vote, the measured value (HasValue
// false for none) and a short reason shown in the ElasticService's status.
type TriggerVote struct {
	Vote     Vote
	HasValue bool
	Value    float64
	Reason   string
}

// Plugin is what a scaling plugin implements: the world's three exports.
type Plugin interface {
	// Info names the plugin; its Hook must be sdk.HookScaling.
	Info() sdk.PluginInfo
	// ValidateSettings checks the settings JSON object once per load; nil accepts it.
	ValidateSettings(settings string) *sdk.PluginError
	// Vote decides one trigger.
	Vote(settings string, r Request) (TriggerVote, *sdk.PluginError)
}

var plugin Plugin

// Export makes p the plugin the exports call; call it from an init function of package main.
func Export(p Plugin) { plugin = p }

// LiftRequest reads the request from vote's flattened parameters (after the settings).
func LiftRequest(m sdk.Memory, esPtr, esLen, typePtr, typeLen, metadataPtr, metadataLen, cooldown uint32, now int64) Request {
	return Request{
		ElasticService:  sdk.LiftString(m, esPtr, esLen),
		TriggerType:     sdk.LiftString(m, typePtr, typeLen),
		Metadata:        sdk.LiftString(m, metadataPtr, metadataLen),
		CooldownSeconds: cooldown,
		Now:             now,
	}
}

// LowerVote allocates the return area of vote, writes the vote (or err, when not nil) into m as
// the canonical ABI lays it out, and returns the area's address.
func LowerVote(m sdk.Memory, v TriggerVote, err *sdk.PluginError) uint32 {
	area := m.Alloc(40, 8)
	if err != nil {
		sdk.PutErrorAt(m, area, 8, err)
		return area
	}
	sdk.PutU8(m, area, 0)
	sdk.PutU8(m, area+8, uint8(v.Vote))
	if v.HasValue {
		sdk.PutU8(m, area+16, 1)
		sdk.PutF64(m, area+24, v.Value)
	} else {
		sdk.PutU8(m, area+16, 0)
	}
	sdk.PutString(m, area+32, v.Reason)
	return area
}
