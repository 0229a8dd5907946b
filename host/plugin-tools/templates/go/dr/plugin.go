//go:build wasip1

// The component's side: the state-checker world's exports come from the SDK's dr package, which
// calls this plugin.
package main

import (
	"example.com/wasmop/sdk"
	"example.com/wasmop/sdk/dr"
)

type checker struct{}

func (checker) Info() sdk.PluginInfo {
	return sdk.PluginInfo{Name: "{{name}}", Version: "0.1.0", Hook: sdk.HookDR}
}

func (checker) ValidateSettings(settings string) *sdk.PluginError { return ParseSettings(settings) }

func (checker) Check(settings string, r dr.Request) (dr.Decision, *sdk.PluginError) {
	if err := ParseSettings(settings); err != nil {
		return dr.Decision{}, err
	}
	d, err := Check(r)
	if err != nil {
		return dr.Decision{}, err
	}
	sdk.Log(sdk.LevelDebug, r.Identity+": "+d.Reason)
	return d, nil
}

func init() { dr.Export(checker{}) }

func main() {}
