module example.com/wasmop/sdk

go 1.24
