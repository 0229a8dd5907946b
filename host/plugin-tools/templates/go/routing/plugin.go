//go:build wasip1

// The component's side: the router world's exports come from the SDK's routing package, which
// calls this plugin.
package main

import (
	"encoding/json"
	"strconv"

	"example.com/wasmop/sdk"
	"example.com/wasmop/sdk/routing"
)

type router struct{}

func (router) Info() sdk.PluginInfo {
	return sdk.PluginInfo{Name: "{{name}}", Version: "0.1.0", Hook: sdk.HookRouting}
}

func (router) ValidateSettings(settings string) *sdk.PluginError { return ParseSettings(settings) }

func (router) Route(settings string, r routing.Request) (routing.Response, *sdk.PluginError) {
	if err := ParseSettings(settings); err != nil {
		return routing.Response{}, err
	}
	http, err := Route(r)
	if err != nil {
		return routing.Response{}, err
	}
	out, jerr := json.Marshal(http)
	if jerr != nil {
		return routing.Response{}, &sdk.PluginError{Message: "cannot write the routes: " + jerr.Error()}
	}
	sdk.Log(sdk.LevelDebug, r.DynamicEnv+": "+strconv.Itoa(len(http))+" routes for subset "+r.Subset)
	return routing.Response{HTTP: string(out)}, nil
}

func init() { routing.Export(router{}) }

func main() {}
