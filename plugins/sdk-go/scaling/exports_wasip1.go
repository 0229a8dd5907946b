//go:build wasip1

package scaling

import "example.com/wasmop/sdk"

//go:wasmexport info
func info() uint32 { return sdk.LowerInfo(sdk.Linear, plugin.Info()) }

//go:wasmexport validate-settings
func validateSettings(ptr, n uint32) uint32 {
	return sdk.LowerUnitResult(sdk.Linear, plugin.ValidateSettings(sdk.LiftString(sdk.Linear, ptr, n)))
}

//go:wasmexport vote
func vote(
	settingsPtr, settingsLen, esPtr, esLen, typePtr, typeLen, metadataPtr, metadataLen,
	cooldown uint32, now int64,
) uint32 {
	m := sdk.Linear
	r := LiftRequest(m, esPtr, esLen, typePtr, typeLen, metadataPtr, metadataLen, cooldown, now)
	v, err := plugin.Vote(sdk.LiftString(m, settingsPtr, settingsLen), r)
	return LowerVote(m, v, err)
}

//go:wasmexport cabi_post_info
func postInfo(uint32) { sdk.Release() }

//go:wasmexport cabi_post_validate-settings
func postValidateSettings(uint32) { sdk.Release() }

//go:wasmexport cabi_post_vote
func postVote(uint32) { sdk.Release() }
