package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tandemllm/tandem/process"
)

// maxWorkers bounds one pool on one host.
const maxWorkers = 256

// Pool says how to start one pool's workers.
type Pool struct {
	// Args are the worker's arguments after the binary (for `tandem`:
	// "worker", "--engine", "mocker", ...). Each occurrence of {n} is
	// replaced by the worker's number in the pool and {id} by its id, so
	// each can get its own --id and ports.
	Args []string
	// Env is added to the supervisor's environment ({n} and {id} as in
	// Args).
	Env []string
}

// Supervisor starts and stops worker processes. Safe for concurrent use.
type Supervisor struct {
	// Binary is the executable (os.Executable() for `tandem planner`).
	Binary string
	Pools  map[string]Pool
	// StopTimeout is how long a SIGTERMed worker may take to drain and
	// exit before it is killed; it should exceed the worker's
	// --deregister-delay plus --drain-timeout.
	StopTimeout time.Duration
	// Output receives the workers' stdout and stderr (nil: discarded).
	Output io.Writer
	Logger *slog.Logger

	mu      sync.Mutex
	running map[string][]*proc
	next    map[string]int
}

type proc struct {
	id   string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

func (s *Supervisor) log() *slog.Logger {
	if s.Logger != nil {
		return s.Logger
	}
	return slog.Default()
}

// Replicas implements planner.Actuator: the workers started and still
// running, per pool (a worker that exited on its own is dropped).
func (s *Supervisor) Replicas(context.Context) (map[string]int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initLocked()
	out := map[string]int{}
	for name := range s.Pools {
		s.reapLocked(name)
		out[name] = len(s.running[name])
	}
	return out, nil
}

func (s *Supervisor) initLocked() {
	if s.running == nil {
		s.running, s.next = map[string][]*proc{}, map[string]int{}
	}
}

func (s *Supervisor) reapLocked(pool string) {
	s.running[pool] = slices.DeleteFunc(s.running[pool], func(p *proc) bool {
		select {
		case <-p.done:
			s.log().Warn("worker exited on its own", "pool", pool, "worker", p.id, "err", p.err)
			return true
		default:
			return false
		}
	})
}

// Scale implements planner.Actuator: it starts workers up to n, or stops
// the newest ones down to n, each drained (SIGTERM, then waited for).
func (s *Supervisor) Scale(ctx context.Context, pool string, n int) error {
	spec, ok := s.Pools[pool]
	if !ok {
		return fmt.Errorf("planner/local: no pool %q", pool)
	}
	if n < 0 || n > maxWorkers {
		return fmt.Errorf("planner/local: pool %s: %d workers out of 0..%d", pool, n, maxWorkers)
	}
	s.mu.Lock()
	s.initLocked()
	s.reapLocked(pool)
	var stop []*proc
	for len(s.running[pool]) < n {
		p, err := s.startLocked(pool, spec)
		if err != nil {
			s.mu.Unlock()
			return err
		}
		s.running[pool] = append(s.running[pool], p)
	}
	for len(s.running[pool]) > n {
		l := len(s.running[pool])
		stop = append(stop, s.running[pool][l-1])
		s.running[pool] = s.running[pool][:l-1]
	}
	s.mu.Unlock()
	var errs []error
	for _, p := range stop {
		if err := s.stop(ctx, p); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (s *Supervisor) startLocked(pool string, spec Pool) (*proc, error) {
	k := s.next[pool]
	s.next[pool]++
	id := pool + "-" + strconv.Itoa(k)
	fill := func(in []string) []string {
		out := make([]string, len(in))
		for i, a := range in {
			out[i] = strings.ReplaceAll(strings.ReplaceAll(a, "{n}", strconv.Itoa(k)), "{id}", id)
		}
		return out
	}
	cmd := exec.Command(s.Binary, fill(spec.Args)...)
	cmd.Env = append(os.Environ(), fill(spec.Env)...)
	cmd.Stdout, cmd.Stderr = s.Output, s.Output
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("planner/local: start %s worker %s: %w", pool, id, err)
	}
	p := &proc{id: id, cmd: cmd, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	s.log().Info("worker started", "pool", pool, "worker", id, "pid", cmd.Process.Pid)
	return p, nil
}

// stop drains one worker: SIGTERM, wait for it to exit (up to
// StopTimeout, or ctx), then SIGKILL.
func (s *Supervisor) stop(ctx context.Context, p *proc) error {
	start := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("planner/local: SIGTERM worker %s: %w", p.id, err)
	}
	to := s.StopTimeout
	if to <= 0 {
		to = time.Minute
	}
	t := time.NewTimer(to)
	defer t.Stop()
	select {
	case <-p.done:
		s.log().Info("worker drained and exited", "worker", p.id, "took", time.Since(start), "exit", p.err)
		return nil
	case <-t.C:
	case <-ctx.Done():
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	s.log().Warn("worker did not drain in time: killed", "diagnostic_code", process.DiagDrainTimeout, "worker", p.id, "waited", time.Since(start))
	return fmt.Errorf("planner/local: worker %s did not exit within %v of SIGTERM: killed", p.id, to)
}

// Close stops every worker (drained, as Scale does).
func (s *Supervisor) Close(ctx context.Context) error {
	s.mu.Lock()
	var all []*proc
	for pool, ps := range s.running {
		all = append(all, ps...)
		s.running[pool] = nil
	}
	s.mu.Unlock()
	var errs []error
	for _, p := range all {
		if err := s.stop(ctx, p); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
