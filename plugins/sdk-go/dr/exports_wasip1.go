//go:build wasip1

package dr

import "example.com/wasmop/sdk"

//go:wasmexport info
func info() uint32 { return sdk.LowerInfo(sdk.Linear, plugin.Info()) }

//go:wasmexport validate-settings
func validateSettings(ptr, n uint32) uint32 {
	return sdk.LowerUnitResult(sdk.Linear, plugin.ValidateSettings(sdk.LiftString(sdk.Linear, ptr, n)))
}

//go:wasmexport check
func check(
	settingsPtr, settingsLen, identityPtr, identityLen uint32, now int64,
	leaseTag, ownerPtr, ownerLen uint32, updated int64, notesPtr, notesLen uint32,
	wait, threshold uint32, startedAt int64, warmup uint32,
) uint32 {
	m := sdk.Linear
	r := LiftRequest(m, identityPtr, identityLen, now, leaseTag, ownerPtr, ownerLen, updated,
		notesPtr, notesLen, wait, threshold, startedAt, warmup)
	d, err := plugin.Check(sdk.LiftString(m, settingsPtr, settingsLen), r)
	return LowerCheck(m, d, err)
}

//go:wasmexport cabi_post_info
func postInfo(uint32) { sdk.Release() }

//go:wasmexport cabi_post_validate-settings
func postValidateSettings(uint32) { sdk.Release() }

//go:wasmexport cabi_post_check
func postCheck(uint32) { sdk.Release() }
