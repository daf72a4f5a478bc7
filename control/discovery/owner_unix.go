//go:build unix

package discovery

import (
	"io/fs"
	"os"
	"syscall"
)

// ownerUID returns the uid owning info's file (ok false where the platform
// cannot say).
func ownerUID(info fs.FileInfo) (uid int, ok bool) {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}

// openFlags open a record without following a symlink and without
// blocking on a FIFO: a FIFO named w1.json froze discovery for good.
const openFlags = os.O_RDONLY | syscall.O_NOFOLLOW | syscall.O_NONBLOCK
