//go:build wasip1

package sdk

import "unsafe"

// Linear is the module's own linear memory. What it allocates is kept reachable until Release,
// which the worlds' post-return exports call, so that the garbage collector (which never moves
// objects) cannot free it while the host reads it.
var Linear Memory = linear{}

type linear struct{}

var pinned [][]byte
var empty [8]byte

func (linear) Alloc(size, align uint32) uint32 { return uint32(uintptr(alloc(size, align))) }

// alloc returns `size` bytes aligned to `align`, pinned until Release.
func alloc(size, align uint32) unsafe.Pointer {
	if size == 0 {
		return unsafe.Pointer(&empty[0])
	}
	buf := make([]byte, size+align)
	pinned = append(pinned, buf)
	base := unsafe.Pointer(&buf[0])
	pad := (uintptr(align) - uintptr(base)%uintptr(align)) % uintptr(align)
	return unsafe.Add(base, pad)
}

// Bytes turns a wasm32 address back into a pointer: sound here, since the memory is linear
// and Go's collector does not move objects (go vet's unsafeptr check cannot know that).
func (linear) Bytes(addr, n uint32) []byte {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(uintptr(addr))), n)
}

// Release drops what was handed to the host since the last call; a world's post-return
// exports call it once the host has read the answer.
func Release() { pinned = nil }

//go:wasmexport cabi_realloc
func cabiRealloc(old unsafe.Pointer, oldSize, align, newSize uint32) unsafe.Pointer {
	p := alloc(newSize, align)
	if oldSize > 0 && newSize > 0 {
		copy(unsafe.Slice((*byte)(p), newSize), unsafe.Slice((*byte)(old), min(oldSize, newSize)))
	}
	return p
}

//go:wasmimport wasmop:plugin/log@0.1.0 log
func hostLog(level uint32, ptr unsafe.Pointer, n uint32)

// Log writes msg to the operator's log at level, tagged with the plugin's name and hook (the
// host keeps at most 4 KiB of a line).
func Log(level Level, msg string) {
	hostLog(uint32(level), unsafe.Pointer(unsafe.StringData(msg)), uint32(len(msg)))
}
