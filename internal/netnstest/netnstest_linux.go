package netnstest

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// Run runs f on an OS thread switched into namespace ns; sockets f
// creates stay in ns. The thread switches back before it is released (a
// thread that cannot is left locked, so the runtime retires it).
func Run(ns string, f func() error) error {
	target, err := os.Open("/var/run/netns/" + ns)
	if err != nil {
		return err
	}
	defer target.Close()
	runtime.LockOSThread()
	orig, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer orig.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("setns %s: %w", ns, err)
	}
	ferr := f()
	if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("setns back from %s: %w (thread retired)", ns, err)
	}
	runtime.UnlockOSThread()
	return ferr
}

// listenIn and dialIn are kvtransfer's Listen and Dial hooks for sockets
// in namespace ns.
