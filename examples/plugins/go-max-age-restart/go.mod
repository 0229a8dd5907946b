module example.com/wasmop/max-age-restart

go 1.24
