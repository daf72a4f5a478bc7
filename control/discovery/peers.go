package discovery

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// peerWait is how long a send to an address discovery has not shown this
// worker yet waits for it: a frontend may hear of a new decode worker
// before this worker's watch does.
const peerWait = 2 * time.Second

// WatchTransferAddrs keeps, until ctx ends, the set of KV transfer
// addresses reg publishes: the only destinations a prefill worker sends to.
func WatchTransferAddrs(ctx context.Context, reg Registry, log *slog.Logger) *TransferAddrs {
	p := &TransferAddrs{addrs: map[string]bool{}, changed: make(chan struct{})}
	go p.watch(ctx, reg, log)
	return p
}

func (p *TransferAddrs) watch(ctx context.Context, reg Registry, log *slog.Logger) {
	for ctx.Err() == nil {
		addrs := map[string]string{} // id → address
		err := reg.Watch(ctx, func(e Event) {
			switch e.Type {
			case EventPut:
				if a := e.Record.KVTransfer.Addr; a != "" {
					addrs[e.Record.ID] = a
				} else {
					delete(addrs, e.Record.ID)
				}
			case EventDelete:
				delete(addrs, e.Record.ID)
			default:
				return
			}
			p.set(addrs)
		})
		if err != nil && ctx.Err() == nil {
			log.Warn("watching discovery for KV transfer peers failed; retrying", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

// TransferAddrs is the set of KV transfer addresses a registry publishes.
type TransferAddrs struct {
	mu      sync.Mutex
	addrs   map[string]bool
	changed chan struct{} // closed and replaced on every change
}

func (p *TransferAddrs) set(byID map[string]string) {
	m := make(map[string]bool, len(byID))
	for _, a := range byID {
		m[a] = true
	}
	p.mu.Lock()
	p.addrs = m
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
}

// Allow is kvtransfer.Config.AllowPeer: addr must be published, or
// become so within peerWait.
func (p *TransferAddrs) Allow(ctx context.Context, addr string) error {
	t := time.NewTimer(peerWait)
	defer t.Stop()
	for {
		p.mu.Lock()
		ok, ch := p.addrs[addr], p.changed
		p.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-t.C:
			return fmt.Errorf("%s is not a KV transfer address published in discovery", addr)
		case <-ctx.Done():
			return fmt.Errorf("%s is not a KV transfer address published in discovery: %w", addr, ctx.Err())
		}
	}
}
