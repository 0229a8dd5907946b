// Package dr exports the state-checker world of wasmop:plugin@0.1.0 for a Go plugin: register
// the plugin with Export from an init function of package main, and the package's
// //go:wasmexport functions (info, validate-settings, check and their post-return functions)
// call it.
//
//	func init() { dr.Export(checker{}) }
//
// Layouts (canonical ABI, wasm32; the shared ones are in package sdk):
//
//	check params          settings (ptr, len), then the request: identity (ptr, len), now i64,
//	                      lease option tag i32, owner (ptr, len), updated-time i64, notes
//	                      (ptr, len), wait-time-seconds i32, failure-threshold i32, started-at
//	                      i64, warmup-seconds i32: fifteen values
//	result<state-decision, plugin-error>  tag u8 @0; ok: state u8 @4, action u8 @5, reason
//	                      string @8; size 24
package dr

import "example.com/wasmop/sdk"

// SkipLeasePod is the lease owner that keeps every instance passive (Admiral's manual switch).
const SkipLeasePod = "SKIP-LEASE-POD"

// Lease is wasmop:plugin/dr.lease-record, the lease as read from the backend. UpdatedTime is
// Unix milliseconds.
type Lease struct {
	Owner       string
	UpdatedTime int64
	Notes       string
}

// Request is wasmop:plugin/dr.state-request: one tick. Lease is nil when the lease does not
// exist yet; Now and StartedAt are Unix milliseconds.
type Request struct {
	Identity         string
	Now              int64
	Lease            *Lease
	WaitTimeSeconds  uint32
	FailureThreshold uint32
	StartedAt        int64
	WarmupSeconds    uint32
}

// State is wasmop:plugin/dr.state: the role this instance takes.
type State uint8

// The cases of State, in WIT order.
const (
	Active State = iota
	Passive
)

// String is the case's WIT name.
func (s State) String() string {
	if s == Passive {
		return "passive"
	}
	return "active"
}

// Action is wasmop:plugin/dr.action: the lease write this instance makes, compare-and-swap on
// the record it read.
type Action uint8

// The cases of Action, in WIT order.
const (
	None Action = iota
	Create
	Renew
	Takeover
)

// String is the case's WIT name.
func (a Action) String() string {
	switch a {
	case Create:
		return "create"
	case Renew:
		return "renew"
	case Takeover:
		return "takeover"
	}
	return "none"
}

// Decision is wasmop:plugin/dr.state-decision: the state, the write, and why.
type Decision struct {
	State  State
	Action Action
	Reason string
}

// Plugin is what a DR plugin implements: the world's three exports.
type Plugin interface {
	// Info names the plugin; its Hook must be sdk.HookDR.
	Info() sdk.PluginInfo
	// ValidateSettings checks the settings JSON object once per load; nil accepts it. A dr
	// entry's settings also carry the host's DR keys (docs/dr.md).
	ValidateSettings(settings string) *sdk.PluginError
	// Check decides one tick.
	Check(settings string, r Request) (Decision, *sdk.PluginError)
}

var plugin Plugin

// Export makes p the plugin the exports call; call it from an init function of package main.
func Export(p Plugin) { plugin = p }

// LiftRequest reads the request from check's flattened parameters (after the settings).
func LiftRequest(
	m sdk.Memory, identityPtr, identityLen uint32, now int64, leaseTag, ownerPtr, ownerLen uint32,
	updated int64, notesPtr, notesLen, wait, threshold uint32, startedAt int64, warmup uint32,
) Request {
	r := Request{
		Identity:         sdk.LiftString(m, identityPtr, identityLen),
		Now:              now,
		WaitTimeSeconds:  wait,
		FailureThreshold: threshold,
		StartedAt:        startedAt,
		WarmupSeconds:    warmup,
	}
	if leaseTag != 0 {
		r.Lease = &Lease{
			Owner:       sdk.LiftString(m, ownerPtr, ownerLen),
			UpdatedTime: updated,
			Notes:       sdk.LiftString(m, notesPtr, notesLen),
		}
	}
	return r
}

// LowerCheck allocates the return area of check, writes the decision (or err, when not nil)
// into m as the canonical ABI lays it out, and returns the area's address.
func LowerCheck(m sdk.Memory, d Decision, err *sdk.PluginError) uint32 {
	area := m.Alloc(24, 4)
	if err != nil {
		sdk.PutError(m, area, err)
		return area
	}
	sdk.PutU8(m, area, 0)
	sdk.PutU8(m, area+4, uint8(d.State))
	sdk.PutU8(m, area+5, uint8(d.Action))
	sdk.PutString(m, area+8, d.Reason)
	return area
}
