//go:build !wasip1

package sdk

import (
	"fmt"
	"os"
)

var levelNames = [...]string{"trace", "debug", "info", "warn", "error"}

// Log writes msg to stderr as `[level] msg`: natively, as in a plugin's `go test`, there is no
// host to log to.
func Log(level Level, msg string) {
	name := "level?"
	if int(level) < len(levelNames) {
		name = levelNames[level]
	}
	fmt.Fprintf(os.Stderr, "[%s] %s\n", name, msg)
}
