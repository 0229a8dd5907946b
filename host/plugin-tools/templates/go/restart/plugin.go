//go:build wasip1

// The component's side: the restart-predicate world's exports come from the SDK's restart
// package, which calls this plugin.
package main

import (
	"strconv"

	"example.com/wasmop/sdk"
	"example.com/wasmop/sdk/restart"
)

type predicate struct{}

func (predicate) Info() sdk.PluginInfo {
	return sdk.PluginInfo{Name: "{{name}}", Version: "0.1.0", Hook: sdk.HookRestart}
}

func (predicate) ValidateSettings(settings string) *sdk.PluginError {
	_, err := ParseSettings(settings)
	return err
}

func (predicate) Evaluate(settings string, r restart.Request) ([]restart.Decision, *sdk.PluginError) {
	s, err := ParseSettings(settings)
	if err != nil {
		return nil, err
	}
	decisions, err := Evaluate(s, r.Pods)
	if err != nil {
		return nil, err
	}
	sdk.Log(sdk.LevelDebug, "policy "+r.Policy+": "+strconv.Itoa(len(decisions))+" pods judged")
	return decisions, nil
}

func init() { restart.Export(predicate{}) }

func main() {}
