// {{name}}: a routing plugin. Requests that match one of the DynamicEnv's istioMatches go to its
// subset: before each route to the service's default version, one copy per istioMatch, narrowed
// by it and sent to the subset (README.md says what the host checks).
//
// The policy (this file) is plain Go with unit tests (`go test ./...`); plugin.go hands it to
// the SDK's routing package.
package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"strings"

	"example.com/wasmop/sdk"
	"example.com/wasmop/sdk/routing"
)

// ParseSettings checks the settings JSON object: this plugin takes no settings yet.
func ParseSettings(text string) *sdk.PluginError {
	var settings map[string]json.RawMessage
	if json.Unmarshal([]byte(text), &settings) != nil || settings == nil {
		return &sdk.PluginError{Message: "settings must be a JSON object", Field: "settings"}
	}
	for key := range settings {
		return &sdk.PluginError{
			Message: fmt.Sprintf("unknown settings key %q: this plugin takes no settings yet", key),
			Field:   "settings",
		}
	}
	return nil
}

type object = map[string]any

// isService: whether a destination host names the request's service: host, host.namespace,
// host.namespace.svc or host.namespace.svc.cluster.local; the short name only when the
// VirtualService is in the service's namespace (Istio reads it in the VirtualService's).
func isService(host string, r *routing.Request, vsNamespace string) bool {
	long := r.Host + "." + r.Namespace
	return (host == r.Host && (vsNamespace == "" || vsNamespace == r.Namespace)) ||
		host == long || host == long+".svc" || host == long+".svc.cluster.local"
}

// narrow is entry (a route's match entry) narrowed by m, or nil when it already has another
// condition on one of m's headers or source labels.
func narrow(entry object, m routing.IstioMatch) object {
	out := maps.Clone(entry)
	add := func(field, key string, want any) bool {
		conditions, ok := out[field].(object)
		if _, present := out[field]; present && !ok {
			return false
		}
		conditions = maps.Clone(conditions)
		if conditions == nil {
			conditions = object{}
		}
		if have, ok := conditions[key]; ok && !reflect.DeepEqual(have, want) {
			return false
		}
		conditions[key] = want
		out[field] = conditions
		return true
	}
	for _, h := range m.Headers {
		if !add("headers", h.Name, object{h.Value.Kind.String(): h.Value.Value}) {
			return nil
		}
	}
	for _, l := range m.SourceLabels {
		if !add("sourceLabels", l.Key, l.Value) {
			return nil
		}
	}
	return out
}

func vsError(message string) *sdk.PluginError {
	return &sdk.PluginError{Message: message, Field: "request.virtual-service"}
}

// Route answers the complete new spec.http of the request's VirtualService: the routes it does
// not own as they came (raw JSON), and its copies.
func Route(r routing.Request) ([]json.RawMessage, *sdk.PluginError) {
	var vs struct {
		Metadata struct {
			Namespace string `json:"namespace"`
		} `json:"metadata"`
		Spec struct {
			HTTP []json.RawMessage `json:"http"`
		} `json:"spec"`
	}
	if err := json.Unmarshal([]byte(r.VirtualService), &vs); err != nil {
		return nil, vsError("not a VirtualService: " + err.Error())
	}
	out, copies := []json.RawMessage{}, 0
	for _, raw := range vs.Spec.HTTP {
		var fields object
		if json.Unmarshal(raw, &fields) != nil || fields == nil {
			return nil, vsError("spec.http holds a route that is not an object")
		}
		if name, _ := fields["name"].(string); strings.HasPrefix(name, r.RoutePrefix) {
			continue // this plugin's earlier output: made again below
		}
		if destination := defaultDestination(fields, &r, vs.Metadata.Namespace); destination != nil {
			destination = maps.Clone(destination)
			destination["subset"] = r.Subset
			entries, _ := fields["match"].([]any)
			if len(entries) == 0 {
				entries = []any{object{}}
			}
			for _, m := range r.Matches {
				narrowed := []any{}
				for _, e := range entries {
					if e, ok := e.(object); ok {
						if n := narrow(e, m); n != nil {
							narrowed = append(narrowed, n)
						}
					}
				}
				if len(narrowed) == 0 {
					continue
				}
				dup := maps.Clone(fields)
				dup["name"] = fmt.Sprintf("%s%d", r.RoutePrefix, copies)
				dup["match"] = narrowed
				dup["route"] = []any{object{"destination": destination}}
				text, err := json.Marshal(dup)
				if err != nil {
					return nil, vsError("cannot write a copy of route " + fmt.Sprint(fields["name"]) + ": " + err.Error())
				}
				out = append(out, text)
				copies++
			}
		}
		out = append(out, raw)
	}
	return out, nil
}

// defaultDestination is the route's destination to the service at its default version, or nil.
func defaultDestination(route object, r *routing.Request, vsNamespace string) object {
	destinations, _ := route["route"].([]any)
	for _, d := range destinations {
		d, _ := d.(object)
		destination, _ := d["destination"].(object)
		host, _ := destination["host"].(string)
		if subset, _ := destination["subset"].(string); isService(host, r, vsNamespace) && subset == r.DefaultVersion {
			return destination
		}
	}
	return nil
}
