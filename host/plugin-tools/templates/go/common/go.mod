module example.com/{{name}}

go 1.24

require example.com/wasmop/sdk v0.0.0

// The Go SDK of the wasmop checkout this plugin was generated against (plugins/sdk-go); its
// module path is a placeholder until the project publishes one.
replace example.com/wasmop/sdk => {{sdk}}/plugins/sdk-go
