//go:build wasip1

package restart

import "example.com/wasmop/sdk"

//go:wasmexport info
func info() uint32 { return sdk.LowerInfo(sdk.Linear, plugin.Info()) }

//go:wasmexport validate-settings
func validateSettings(ptr, n uint32) uint32 {
	return sdk.LowerUnitResult(sdk.Linear, plugin.ValidateSettings(sdk.LiftString(sdk.Linear, ptr, n)))
}

//go:wasmexport evaluate
func evaluate(
	settingsPtr, settingsLen, policyPtr, policyLen, desiredPtr, desiredLen,
	appliedPtr, appliedLen, podsPtr, podsLen uint32,
) uint32 {
	m := sdk.Linear
	r := Request{
		Policy:  sdk.LiftString(m, policyPtr, policyLen),
		Desired: sdk.LiftString(m, desiredPtr, desiredLen),
		Applied: sdk.LiftString(m, appliedPtr, appliedLen),
		Pods:    sdk.LiftString(m, podsPtr, podsLen),
	}
	decisions, err := plugin.Evaluate(sdk.LiftString(m, settingsPtr, settingsLen), r)
	return LowerEvaluate(m, decisions, err)
}

//go:wasmexport cabi_post_info
func postInfo(uint32) { sdk.Release() }

//go:wasmexport cabi_post_validate-settings
func postValidateSettings(uint32) { sdk.Release() }

//go:wasmexport cabi_post_evaluate
func postEvaluate(uint32) { sdk.Release() }
