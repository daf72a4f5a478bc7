package kvtransfer

import (
	"net"
	"testing"
	"time"
)

// Finding 7 of issue 12: large control frames took a decode worker's
// memory far past its --transfer-budget (docs/benchmarks.md). Each frame
// is now reserved from the budget before it is allocated: past the budget
// the connection waits, then is closed, and the budget is never exceeded.
func TestControlFramesBoundedByBudget(t *testing.T) {
	const limit = 8 << 20
	dst := newMocker(t, 64)
	b := newNode(t, "d0", dst, limit, nil, true)
	b.cfg.Timeout = 300 * time.Millisecond
	var conns []net.Conn
	for range 12 {
		c, err := net.Dial("tcp", b.Addr())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		// A Begin header claiming a 3 MiB payload, then silence.
		c.Write(appendFrameHeader(nil, frameBegin, 3<<20))
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	time.Sleep(200 * time.Millisecond)
	if st := b.Budget().Stats(); st.Peak > limit || st.Allocated > limit {
		t.Fatalf("budget exceeded: %+v", st)
	}
	// The connections that got no reservation are closed after the
	// timeout; the others when the read deadline passes.
	closed := 0
	for _, c := range conns {
		// Generous: the node closes them 300 ms in; a loaded machine may be late.
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err != nil {
			if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
				closed++
			}
		}
	}
	if closed != len(conns) {
		t.Fatalf("%d of %d stalled connections closed", closed, len(conns))
	}
	deadline := time.Now().Add(3 * time.Second)
	for b.Budget().Stats().InUse != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("reservations not returned: %+v", b.Budget().Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A header larger than the whole budget is refused at once.
	c, err := net.Dial("tcp", b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write(appendFrameHeader(nil, frameBegin, 16<<20))
	c.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("a header beyond the budget was answered")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("a header beyond the budget was not refused at once")
	}
}
