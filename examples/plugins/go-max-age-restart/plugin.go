//go:build wasip1

// The component's side: the restart-predicate world's exports come from the SDK's restart
// package, which calls this plugin.
package main

import (
	"strconv"
	"time"

	"example.com/wasmop/sdk"
	"example.com/wasmop/sdk/restart"
)

type maxAge struct{}

func (maxAge) Info() sdk.PluginInfo {
	return sdk.PluginInfo{Name: "max-age-restart", Version: "0.1.0", Hook: sdk.HookRestart}
}

func (maxAge) ValidateSettings(settings string) *sdk.PluginError {
	_, err := ParseSettings(settings)
	return err
}

func (maxAge) Evaluate(settings string, r restart.Request) ([]restart.Decision, *sdk.PluginError) {
	decisions, err := Evaluate(settings, r.Pods, time.Now())
	if err != nil {
		return nil, err
	}
	restarts := 0
	for _, d := range decisions {
		if d.Restart {
			restarts++
		}
	}
	sdk.Log(sdk.LevelDebug, "policy "+r.Policy+": "+strconv.Itoa(restarts)+" of "+
		strconv.Itoa(len(decisions))+" pods past their maximum age")
	return decisions, nil
}

func init() { restart.Export(maxAge{}) }

func main() {}
