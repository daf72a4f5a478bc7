//go:build linux

package discovery

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"strconv"
)

// processGone reports whether pid names no running process on this host. A
// zombie counts as gone: a SIGKILLed worker whose parent has not reaped it
// yet serves nothing.
func processGone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if errors.Is(err, fs.ErrNotExist) {
		return true
	}
	if err != nil {
		return false // cannot tell; the TTL decides
	}
	// The state follows the command name, which is in parentheses and may
	// itself contain ") ".
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return false
	}
	return b[i+2] == 'Z' || b[i+2] == 'X'
}
