module wasmop.dev/testbackend

go 1.26.0
