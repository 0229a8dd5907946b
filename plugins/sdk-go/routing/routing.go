// Package routing exports the router world of wasmop:plugin@0.1.0 for a Go plugin: register the
// plugin with Export from an init function of package main, and the package's //go:wasmexport
// functions (info, validate-settings, route and their post-return functions) call it.
//
//	func init() { routing.Export(router{}) }
//
// Layouts (canonical ABI, wasm32; the shared ones are in package sdk):
//
//	route params          one i32: the address of the tuple (settings, route-request), which
//	                      flattens to 20 values, more than the 16 passed directly
//	(settings, request)   settings @0, then route-request @8: dynamic-env @8, unique-name @16,
//	                      subset @24, host @32, namespace @40, default-version @48, matches
//	                      (ptr, len) @56, route-prefix @64, virtual-service @72; size 80
//	istio-match           headers (ptr, len) @0, source-labels (ptr, len) @8; size 16
//	header-match          name @0, value string-match @8; size 20
//	string-match          tag u8 @0 (exact, prefix, regex), string @4; size 12
//	label                 key @0, value @8; size 16
//	result<route-response, plugin-error>  tag u8 @0; ok: http string @4; size 24
package routing

import "example.com/wasmop/sdk"

// MatchKind is how a header value is compared: the case of wasmop:plugin/routing.string-match.
type MatchKind uint8

// The cases of MatchKind, in WIT order.
const (
	Exact MatchKind = iota
	Prefix
	Regex
)

// String is the case's name as Istio's StringMatch writes it: exact, prefix or regex.
func (k MatchKind) String() string {
	switch k {
	case Exact:
		return "exact"
	case Prefix:
		return "prefix"
	case Regex:
		return "regex"
	}
	return "unknown"
}

// StringMatch is wasmop:plugin/routing.string-match: a header value compared one way.
type StringMatch struct {
	Kind  MatchKind
	Value string
}

// Istio is the match in the JSON form of Istio's StringMatch: {"exact": "jason"}.
func (s StringMatch) Istio() map[string]any { return map[string]any{s.Kind.String(): s.Value} }

// HeaderMatch is one header condition of an istioMatch.
type HeaderMatch struct {
	Name  string
	Value StringMatch
}

// Label is a Kubernetes label key=value.
type Label struct {
	Key   string
	Value string
}

// IstioMatch is one entry of the DynamicEnv's spec.istioMatches: its headers and source labels
// are ANDed; separate entries are ORed.
type IstioMatch struct {
	Headers      []HeaderMatch
	SourceLabels []Label
}

// Request is wasmop:plugin/routing.route-request: one VirtualService to rewrite for one subset
// and one service host. VirtualService is the networking.istio.io/v1 object as JSON; routes
// whose name starts with RoutePrefix are the plugin's earlier output (plugins/sdk/wit/plugin.wit
// says what the host checks).
type Request struct {
	DynamicEnv     string
	UniqueName     string
	Subset         string
	Host           string
	Namespace      string
	DefaultVersion string
	Matches        []IstioMatch
	RoutePrefix    string
	VirtualService string
}

// Response is wasmop:plugin/routing.route-response: HTTP is the complete new spec.http, a JSON
// array of Istio HTTPRoutes.
type Response struct {
	HTTP string
}

// Plugin is what a routing plugin implements: the world's three exports.
type Plugin interface {
	// Info names the plugin; its Hook must be sdk.HookRouting.
	Info() sdk.PluginInfo
	// ValidateSettings checks the settings JSON object once per load; nil accepts it.
	ValidateSettings(settings string) *sdk.PluginError
	// Route answers the VirtualService's complete new spec.http.
	Route(settings string, r Request) (Response, *sdk.PluginError)
}

var plugin Plugin

// Export makes p the plugin the exports call; call it from an init function of package main.
func Export(p Plugin) { plugin = p }

// LiftArgs reads route's parameters from the tuple the host stored at args: the settings and
// the request.
func LiftArgs(m sdk.Memory, args uint32) (string, Request) {
	settings := sdk.StringAt(m, args)
	r := args + 8
	return settings, Request{
		DynamicEnv:     sdk.StringAt(m, r),
		UniqueName:     sdk.StringAt(m, r+8),
		Subset:         sdk.StringAt(m, r+16),
		Host:           sdk.StringAt(m, r+24),
		Namespace:      sdk.StringAt(m, r+32),
		DefaultVersion: sdk.StringAt(m, r+40),
		Matches:        liftMatches(m, sdk.U32(m, r+48), sdk.U32(m, r+52)),
		RoutePrefix:    sdk.StringAt(m, r+56),
		VirtualService: sdk.StringAt(m, r+64),
	}
}

func liftMatches(m sdk.Memory, ptr, n uint32) []IstioMatch {
	out := make([]IstioMatch, n)
	for i := range out {
		elem := ptr + uint32(16*i)
		headers := make([]HeaderMatch, sdk.U32(m, elem+4))
		for j := range headers {
			h := sdk.U32(m, elem) + uint32(20*j)
			headers[j] = HeaderMatch{
				Name:  sdk.StringAt(m, h),
				Value: StringMatch{Kind: MatchKind(sdk.U8(m, h+8)), Value: sdk.StringAt(m, h+12)},
			}
		}
		labels := make([]Label, sdk.U32(m, elem+12))
		for j := range labels {
			l := sdk.U32(m, elem+8) + uint32(16*j)
			labels[j] = Label{Key: sdk.StringAt(m, l), Value: sdk.StringAt(m, l+8)}
		}
		out[i] = IstioMatch{Headers: headers, SourceLabels: labels}
	}
	return out
}

// LowerRoute allocates the return area of route, writes the response (or err, when not nil)
// into m as the canonical ABI lays it out, and returns the area's address.
func LowerRoute(m sdk.Memory, resp Response, err *sdk.PluginError) uint32 {
	area := m.Alloc(24, 4)
	if err != nil {
		sdk.PutError(m, area, err)
		return area
	}
	sdk.PutU8(m, area, 0)
	sdk.PutString(m, area+4, resp.HTTP)
	return area
}
