package requestplane

import (
	"fmt"
	"strings"
	"sync"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/kvtransfer"
)

// LocalScheme begins the request-plane address of a worker served in
// process (RegisterLocal): a frontend of the same process resolves it with
// LookupLocal instead of dialling, and no byte crosses a socket.
const LocalScheme = "inproc://"

// Local is a worker served in process: what a frontend reaches over gRPC,
// handed over directly.
type Local struct {
	// Gen takes the worker's streams (its drain gate, not the bare engine).
	Gen engine.Generator
	// Side is its part in disaggregated prefill; nil for aggregated workers.
	Side kvtransfer.Side
	// Engine is what gRPC does not carry: the engine's info, its timing
	// model and its queue report.
	Engine engine.Engine
}

var locals = struct {
	sync.Mutex
	byAddr map[string]*Local
	next   uint64
}{byAddr: map[string]*Local{}}

// RegisterLocal serves l in process under a fresh address,
// "inproc://<n>/<id>" (unique in the process, so systems started side by
// side never meet), until the returned func withdraws it.
func RegisterLocal(id string, l *Local) (addr string, withdraw func()) {
	locals.Lock()
	defer locals.Unlock()
	locals.next++
	addr = fmt.Sprintf("%s%d/%s", LocalScheme, locals.next, id)
	locals.byAddr[addr] = l
	return addr, func() {
		locals.Lock()
		delete(locals.byAddr, addr)
		locals.Unlock()
	}
}

// LookupLocal resolves an address RegisterLocal gave out. ok is false for
// any other address; err is set for an in-process address that is not (or
// no longer) served.
func LookupLocal(addr string) (l *Local, ok bool, err error) {
	if !strings.HasPrefix(addr, LocalScheme) {
		return nil, false, nil
	}
	locals.Lock()
	defer locals.Unlock()
	if l = locals.byAddr[addr]; l == nil {
		return nil, true, fmt.Errorf("requestplane: no worker is served in process at %s", addr)
	}
	return l, true, nil
}
