// Package restart exports the restart-predicate world of wasmop:plugin@0.1.0 for a Go plugin:
// register the plugin with Export from an init function of package main, and the package's
// //go:wasmexport functions (info, validate-settings, evaluate and their post-return
// functions) call it.
//
//	func init() { restart.Export(maxAge{}) }
//
// Layouts (canonical ABI, wasm32; the shared ones are in package sdk):
//
//	evaluate params       settings (ptr, len), then the request's policy, desired, applied,
//	                      pods (ptr, len each): ten i32
//	result<list<pod-decision>, plugin-error>  tag u8 @0; ok: list (ptr, len) @4; size 24
//	pod-decision          restart u8 @0, reason string @4; size 12
package restart

import "example.com/wasmop/sdk"

// Request is wasmop:plugin/restart.restart-request: a page of pods to judge. Desired and
// Applied are JSON objects (Applied is `null` at first), Pods a JSON array of core/v1 Pods.
type Request struct {
	Policy  string
	Desired string
	Applied string
	Pods    string
}

// Decision is wasmop:plugin/restart.pod-decision: whether one pod restarts, and why.
type Decision struct {
	Restart bool
	Reason  string
}

// Plugin is what a restart plugin implements: the world's three exports.
type Plugin interface {
	// Info names the plugin; its Hook must be sdk.HookRestart.
	Info() sdk.PluginInfo
	// ValidateSettings checks the settings JSON object once per load; nil accepts it.
	ValidateSettings(settings string) *sdk.PluginError
	// Evaluate decides the page: exactly one Decision per pod, in page order.
	Evaluate(settings string, r Request) ([]Decision, *sdk.PluginError)
}

var plugin Plugin

// Export makes p the plugin the exports call; call it from an init function of package main.
func Export(p Plugin) { plugin = p }

// LowerEvaluate allocates the return area of evaluate, writes the decisions (or err, when not
// nil) into m as the canonical ABI lays them out, and returns the area's address.
func LowerEvaluate(m sdk.Memory, decisions []Decision, err *sdk.PluginError) uint32 {
	area := m.Alloc(24, 4)
	if err != nil {
		sdk.PutError(m, area, err)
		return area
	}
	list := m.Alloc(uint32(12*len(decisions)), 4)
	for i, d := range decisions {
		elem := list + uint32(12*i)
		var restart uint8
		if d.Restart {
			restart = 1
		}
		sdk.PutU8(m, elem, restart)
		sdk.PutString(m, elem+4, d.Reason)
	}
	sdk.PutU8(m, area, 0)
	sdk.PutU32(m, area+4, list)
	sdk.PutU32(m, area+8, uint32(len(decisions)))
	return area
}
