module example.com/wasmop/max-age-restart

go 1.24

require example.com/wasmop/sdk v0.0.0

// The Go SDK of this repository (plugins/sdk-go); outside it, point this at a checkout or a
// vendored copy of that directory.
replace example.com/wasmop/sdk => ../../../plugins/sdk-go
