//go:build wasip1

// Canonical ABI glue for the restart-predicate world of wasmop:plugin@0.1.0, by hand: the
// exports take the flattened parameters (strings as pointer and length) and return a pointer to
// a return area laid out as the component model's canonical ABI says (plugins/sdk/wit/plugin.wit):
//
//	plugin-info                            name @0, version @8 (ptr, len), hook u8 @16; size 20
//	result<_, plugin-error>                tag u8 @0; error: message @4, field option @12 (tag),
//	                                       @16 (ptr, len); size 24
//	result<list<pod-decision>, plugin-error>  tag u8 @0; ok: list @4 (ptr, len); error as above
//	pod-decision                           restart u8 @0, reason @4 (ptr, len); size 12
//
// Memory handed to the host (cabi_realloc, return areas, strings) is kept reachable in
// `pinned` until the host's post-return call, so the garbage collector (which never moves
// objects) cannot free it while the host reads it. Built with
// `GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared`, embedded with
// `wasm-tools component embed` and wrapped with `wasm-tools component new --adapt` (README.md).
package main

import (
	"time"
	"unsafe"
)

const hookRestart = 2 // wasmop:plugin/types.hook: routing, scaling, restart, dr

// Levels of wasmop:plugin/log.level.
const (
	logTrace = iota
	logDebug
	logInfo
	logWarn
	logError
)

//go:wasmimport wasmop:plugin/log@0.1.0 log
func hostLog(level uint32, ptr unsafe.Pointer, n uint32)

func logf(level uint32, msg string) {
	hostLog(level, unsafe.Pointer(unsafe.StringData(msg)), uint32(len(msg)))
}

var pinned [][]byte
var empty [8]byte

// alloc returns `size` bytes aligned to `align`, kept alive until the next post-return.
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

//go:wasmexport cabi_realloc
func cabiRealloc(old unsafe.Pointer, oldSize, align, newSize uint32) unsafe.Pointer {
	p := alloc(newSize, align)
	if oldSize > 0 && newSize > 0 {
		copy(unsafe.Slice((*byte)(p), newSize), unsafe.Slice((*byte)(old), min(oldSize, newSize)))
	}
	return p
}

func release() { pinned = nil }

// lift copies a string the host lowered into our memory.
func lift(ptr unsafe.Pointer, n uint32) string {
	if n == 0 {
		return ""
	}
	return string(unsafe.Slice((*byte)(ptr), n))
}

func addr(p unsafe.Pointer) uint32 { return uint32(uintptr(p)) }

func putU8(area unsafe.Pointer, off uintptr, v uint8) { *(*uint8)(unsafe.Add(area, off)) = v }

func putU32(area unsafe.Pointer, off uintptr, v uint32) { *(*uint32)(unsafe.Add(area, off)) = v }

// putString lowers s into fresh memory and writes (ptr, len) at area+off.
func putString(area unsafe.Pointer, off uintptr, s string) {
	p := alloc(uint32(len(s)), 1)
	copy(unsafe.Slice((*byte)(p), len(s)), s)
	putU32(area, off, addr(p))
	putU32(area, off+4, uint32(len(s)))
}

// putError writes the error case of a result<_, plugin-error> return area.
func putError(area unsafe.Pointer, e *PluginError) {
	putU8(area, 0, 1)
	putString(area, 4, e.Message)
	if e.Field == "" {
		putU8(area, 12, 0)
		return
	}
	putU8(area, 12, 1)
	putString(area, 16, e.Field)
}

//go:wasmexport info
func info() unsafe.Pointer {
	area := alloc(20, 4)
	putString(area, 0, "max-age-restart")
	putString(area, 8, "0.1.0")
	putU8(area, 16, hookRestart)
	return area
}

//go:wasmexport validate-settings
func validateSettings(ptr unsafe.Pointer, n uint32) unsafe.Pointer {
	area := alloc(24, 4)
	if _, err := ParseSettings(lift(ptr, n)); err != nil {
		putError(area, err)
	} else {
		putU8(area, 0, 0)
	}
	return area
}

//go:wasmexport evaluate
func evaluate(
	settingsPtr unsafe.Pointer, settingsLen uint32,
	policyPtr unsafe.Pointer, policyLen uint32,
	desiredPtr unsafe.Pointer, desiredLen uint32,
	appliedPtr unsafe.Pointer, appliedLen uint32,
	podsPtr unsafe.Pointer, podsLen uint32,
) unsafe.Pointer {
	area := alloc(24, 4)
	policy := lift(policyPtr, policyLen)
	decisions, err := Evaluate(lift(settingsPtr, settingsLen), lift(podsPtr, podsLen), time.Now())
	if err != nil {
		putError(area, err)
		return area
	}
	list := alloc(uint32(12*len(decisions)), 4)
	restarts := 0
	for i, d := range decisions {
		elem := unsafe.Add(list, 12*i)
		if d.Restart {
			putU8(elem, 0, 1)
			restarts++
		} else {
			putU8(elem, 0, 0)
		}
		putString(elem, 4, d.Reason)
	}
	putU8(area, 0, 0)
	putU32(area, 4, addr(list))
	putU32(area, 8, uint32(len(decisions)))
	logf(logDebug, "policy "+policy+": "+itoa(restarts)+" of "+itoa(len(decisions))+" pods past their maximum age")
	return area
}

//go:wasmexport cabi_post_info
func postInfo(unsafe.Pointer) { release() }

//go:wasmexport cabi_post_validate-settings
func postValidateSettings(unsafe.Pointer) { release() }

//go:wasmexport cabi_post_evaluate
func postEvaluate(unsafe.Pointer) { release() }

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for ; n > 0; n /= 10 {
		i--
		b[i] = byte('0' + n%10)
	}
	return string(b[i:])
}

func main() {}
