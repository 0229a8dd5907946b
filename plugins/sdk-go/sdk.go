// Package sdk holds, once, the canonical ABI glue that a Go plugin of wasmop needs: the types
// every world shares (PluginInfo, PluginError, log levels), the memory that strings and return
// areas are lowered into, and the lowering of the shared types. One subpackage per world exports
// the world's functions: routing (router), scaling (scaler), restart (restart-predicate) and dr
// (state-checker).
//
// A plugin is plain Go built with `GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared`
// (Go 1.24 or newer: //go:wasmexport), embedded with `wasm-tools component embed` and wrapped
// with `wasm-tools component new --adapt wasi_snapshot_preview1=adapter.wasm`, the adapter being
// adapter/adapter.wat of this module (README.md). Natively (`go test`) the same code builds: Log
// writes to stderr and the exports are left out.
//
// The layouts follow the component model's canonical ABI for wasm32 (plugins/sdk/wit/plugin.wit):
//
//	string                       ptr u32 @0, len u32 @4; size 8, align 4
//	plugin-info                  name @0, version @8, hook u8 @16; size 20
//	result<_, plugin-error>      tag u8 @0; error: message @4, field option tag u8 @12,
//	                             field string @16; size 24
//	plugin-error                 message @0, field option tag u8 @8, field string @12; size 20,
//	                             align 4: in a result<T, plugin-error> it sits where T's
//	                             alignment puts the payload (@4, or @8 when T holds an f64)
package sdk

import (
	"encoding/binary"
	"math"
)

// Hook is wasmop:plugin/types.hook: which extension point a plugin implements.
type Hook uint8

// The cases of Hook, in WIT order.
const (
	HookRouting Hook = iota
	HookScaling
	HookRestart
	HookDR
)

// Level is wasmop:plugin/log.level, the severity of a log line.
type Level uint32

// The cases of Level, in WIT order.
const (
	LevelTrace Level = iota
	LevelDebug
	LevelInfo
	LevelWarn
	LevelError
)

// PluginInfo is what a plugin's `info` export answers: its name (as the registry shows it),
// its own version and the hook of its world.
type PluginInfo struct {
	Name    string
	Version string
	Hook    Hook
}

// PluginError is a decision the plugin refuses to make, or settings it rejects. Field is the
// offending input as a dotted path (e.g. `settings.maxAge`), or "" when there is none.
type PluginError struct {
	Message string
	Field   string
}

func (e *PluginError) Error() string {
	if e.Field == "" {
		return e.Message
	}
	return e.Field + ": " + e.Message
}

// Memory is the linear memory that values are lowered into: the module's own memory in a
// component (Linear), a byte slice in tests. Addresses are wasm32 addresses.
type Memory interface {
	// Alloc returns the address of `size` fresh bytes aligned to `align` (a power of two),
	// which stay valid until the host's post-return call.
	Alloc(size, align uint32) uint32
	// Bytes is the `n` bytes at `addr`, to read or write in place.
	Bytes(addr, n uint32) []byte
}

// PutU8 writes v at addr.
func PutU8(m Memory, addr uint32, v uint8) { m.Bytes(addr, 1)[0] = v }

// PutU32 writes v little-endian at addr.
func PutU32(m Memory, addr uint32, v uint32) { binary.LittleEndian.PutUint32(m.Bytes(addr, 4), v) }

// PutU64 writes v little-endian at addr.
func PutU64(m Memory, addr uint32, v uint64) { binary.LittleEndian.PutUint64(m.Bytes(addr, 8), v) }

// PutF64 writes v at addr as the canonical ABI stores an f64 (IEEE 754, little-endian).
func PutF64(m Memory, addr uint32, v float64) { PutU64(m, addr, math.Float64bits(v)) }

// U8 reads the byte at addr.
func U8(m Memory, addr uint32) uint8 { return m.Bytes(addr, 1)[0] }

// U32 reads the little-endian u32 at addr.
func U32(m Memory, addr uint32) uint32 { return binary.LittleEndian.Uint32(m.Bytes(addr, 4)) }

// StringAt lifts the string whose (ptr, len) the host stored at addr (a field of a record it
// lowered into memory).
func StringAt(m Memory, addr uint32) string { return LiftString(m, U32(m, addr), U32(m, addr+4)) }

// PutString copies s into fresh memory and writes its (ptr, len) at addr.
func PutString(m Memory, addr uint32, s string) {
	p := m.Alloc(uint32(len(s)), 1)
	copy(m.Bytes(p, uint32(len(s))), s)
	PutU32(m, addr, p)
	PutU32(m, addr+4, uint32(len(s)))
}

// LiftString copies the `n` bytes at ptr (a string the host lowered) into a Go string.
func LiftString(m Memory, ptr, n uint32) string {
	if n == 0 {
		return ""
	}
	return string(m.Bytes(ptr, n))
}

// LowerInfo allocates a plugin-info return area for info and returns its address.
func LowerInfo(m Memory, info PluginInfo) uint32 {
	area := m.Alloc(20, 4)
	PutString(m, area, info.Name)
	PutString(m, area+8, info.Version)
	PutU8(m, area+16, uint8(info.Hook))
	return area
}

// PutError writes the error case of a result<T, plugin-error> whose payload is at area+4 (tag
// 1 at area, the record at area+4): a T of alignment 4 at most, as every T but the scaler's
// trigger-vote (PutErrorAt).
func PutError(m Memory, area uint32, e *PluginError) { PutErrorAt(m, area, 4, e) }

// PutErrorAt writes the error case of a result<T, plugin-error> whose payload is at
// area+payload: tag 1 at area, the plugin-error record at area+payload (payload is 4, or 8 when
// T has alignment 8).
func PutErrorAt(m Memory, area, payload uint32, e *PluginError) {
	PutU8(m, area, 1)
	at := area + payload
	PutString(m, at, e.Message)
	if e.Field == "" {
		PutU8(m, at+8, 0)
		return
	}
	PutU8(m, at+8, 1)
	PutString(m, at+12, e.Field)
}

// LowerUnitResult allocates the return area of a result<_, plugin-error> (validate-settings):
// tag 0 for a nil err, else the error case. It returns the area's address.
func LowerUnitResult(m Memory, err *PluginError) uint32 {
	area := m.Alloc(24, 4)
	if err != nil {
		PutError(m, area, err)
	} else {
		PutU8(m, area, 0)
	}
	return area
}

// SliceMemory is a Memory over a growable byte slice, for native tests of lowering code: the
// first allocation is at address 8 (0 stays unused, as a null pointer would).
type SliceMemory struct {
	Buf []byte
}

// Alloc appends `size` zero bytes at the next address aligned to `align` (a power of two).
func (m *SliceMemory) Alloc(size, align uint32) uint32 {
	start := max(uint32(len(m.Buf)), 8)
	start = (start + align - 1) &^ (align - 1)
	if need := int(start + size); need > len(m.Buf) {
		m.Buf = append(m.Buf, make([]byte, need-len(m.Buf))...)
	}
	return start
}

// Bytes is the `n` bytes at addr; it panics past the end, as a wasm trap would.
func (m *SliceMemory) Bytes(addr, n uint32) []byte { return m.Buf[addr : addr+n] }

// U8 reads the byte at addr.
func (m *SliceMemory) U8(addr uint32) uint8 { return m.Buf[addr] }

// U32 reads the little-endian u32 at addr.
func (m *SliceMemory) U32(addr uint32) uint32 {
	return binary.LittleEndian.Uint32(m.Buf[addr : addr+4])
}

// F64 reads the little-endian f64 at addr.
func (m *SliceMemory) F64(addr uint32) float64 {
	return math.Float64frombits(binary.LittleEndian.Uint64(m.Buf[addr : addr+8]))
}

// String reads the string whose (ptr, len) is at addr.
func (m *SliceMemory) String(addr uint32) string {
	return LiftString(m, m.U32(addr), m.U32(addr+4))
}
