// Package etcdtest runs a real etcd server inside a test process (etcd's
// own embed package), so the etcd discovery backend is tested against the
// server it will meet in production, not a fake. The server can be stopped
// and restarted on the same ports, with or without its data, to test
// reconnection. Only test binaries import this package.
package etcdtest
