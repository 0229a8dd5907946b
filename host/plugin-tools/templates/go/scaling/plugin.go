//go:build wasip1

// The component's side: the scaler world's exports come from the SDK's scaling package, which
// calls this plugin.
package main

import (
	"example.com/wasmop/sdk"
	"example.com/wasmop/sdk/scaling"
)

type scaler struct{}

func (scaler) Info() sdk.PluginInfo {
	return sdk.PluginInfo{Name: "{{name}}", Version: "0.1.0", Hook: sdk.HookScaling}
}

func (scaler) ValidateSettings(settings string) *sdk.PluginError {
	_, err := ParseSettings(settings)
	return err
}

func (scaler) Vote(settings string, r scaling.Request) (scaling.TriggerVote, *sdk.PluginError) {
	s, err := ParseSettings(settings)
	if err != nil {
		return scaling.TriggerVote{}, err
	}
	v := Vote(s, r)
	sdk.Log(sdk.LevelDebug, v.Reason)
	return v, nil
}

func init() { scaling.Export(scaler{}) }

func main() {}
