//go:build !linux

package doctor

import "errors"

// statFree is not implemented off Linux: the check then says so.
func statFree(string) (int64, error) {
	return 0, errors.New("free space is read on Linux only")
}
