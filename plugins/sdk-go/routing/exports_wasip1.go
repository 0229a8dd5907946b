//go:build wasip1

package routing

import "example.com/wasmop/sdk"

//go:wasmexport info
func info() uint32 { return sdk.LowerInfo(sdk.Linear, plugin.Info()) }

//go:wasmexport validate-settings
func validateSettings(ptr, n uint32) uint32 {
	return sdk.LowerUnitResult(sdk.Linear, plugin.ValidateSettings(sdk.LiftString(sdk.Linear, ptr, n)))
}

//go:wasmexport route
func route(args uint32) uint32 {
	settings, r := LiftArgs(sdk.Linear, args)
	resp, err := plugin.Route(settings, r)
	return LowerRoute(sdk.Linear, resp, err)
}

//go:wasmexport cabi_post_info
func postInfo(uint32) { sdk.Release() }

//go:wasmexport cabi_post_validate-settings
func postValidateSettings(uint32) { sdk.Release() }

//go:wasmexport cabi_post_route
func postRoute(uint32) { sdk.Release() }
