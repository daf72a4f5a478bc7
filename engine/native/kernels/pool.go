package kernels

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// Pool is a fixed set of worker goroutines that split index ranges. A decode
// step issues dozens of products per token; starting goroutines for each one
// costs more than the product itself at small shapes, so the workers live as
// long as the Pool and spin briefly before parking.
//
// A Run cuts its range into a few chunks per thread and the threads take
// chunks from a shared counter, so a thread that is slowed down (a core
// shared with other work, a worker that was parked) does less of the work
// instead of holding the others up. Which thread computes a chunk never
// changes a result: every product is defined per output element.
type Pool struct {
	n       int
	mu      sync.Mutex // one Run at a time: the job fields are shared
	workers []*worker
	closed  bool
	wg      sync.WaitGroup

	// The job of the Run in flight, read by the workers after they see
	// their seq move.
	job     Job
	total   int // range [0,total)
	grain   int
	chunks  int
	next    atomic.Int32 // next chunk to take
	pending atomic.Int32 // workers still inside the job

	// mat is the product job reused by MatMul and friends, so that a
	// product allocates nothing; matMu guards it for the whole product.
	matMu sync.Mutex
	mat   matJob
	f16   [][]float32 // per thread: F16 widening buffers (matMu)
}

// Job is work split over index ranges for RunJob; w is the index in
// [0,Threads) of the thread running the range, so a job can keep
// per-thread scratch. A Job held in a long-lived struct is dispatched
// without allocating, unlike a closure.
type Job interface {
	Run(w, lo, hi int)
}

type funcJob func(lo, hi int)

func (f funcJob) Run(_, lo, hi int) { f(lo, hi) }

type worker struct {
	id    int
	seq   atomic.Uint64 // bumped by Run to publish a job
	state atomic.Int32  // 0 awake, 1 parked
	wake  chan struct{}
	quit  bool
}

// spinIters bounds how long an idle worker polls before parking: long enough
// to cover the gap between two products of one forward pass (and between two
// decode steps), short enough not to burn a shared core between requests.
const spinIters = 1 << 15

// chunksPerThread is how many pieces each thread's share is cut into for
// balancing.
const chunksPerThread = 4

// NewPool starts a pool of n threads of execution (the caller counts as one).
// n < 1 means runtime.GOMAXPROCS(0).
func NewPool(n int) *Pool {
	if n < 1 {
		n = runtime.GOMAXPROCS(0)
	}
	p := &Pool{n: n}
	for i := 1; i < n; i++ {
		w := &worker{id: i, wake: make(chan struct{}, 1)}
		p.workers = append(p.workers, w)
		p.wg.Add(1)
		go p.loop(w)
	}
	return p
}

// Threads reports how many threads share each Run.
func (p *Pool) Threads() int { return p.n }

// Close stops the workers. Later Runs execute on the caller alone.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.closed = true
	for _, w := range p.workers {
		w.quit = true
		p.publish(w)
	}
	p.wg.Wait()
}

func (p *Pool) publish(w *worker) {
	w.seq.Add(1)
	if w.state.CompareAndSwap(1, 0) {
		w.wake <- struct{}{}
	}
}

// Run calls fn over [0,n) split into ranges whose bounds are multiples of
// grain (except the last), spread over the pool's threads. It returns when
// all ranges are done. Concurrent Runs are serialised.
func (p *Pool) Run(n, grain int, fn func(lo, hi int)) {
	p.RunJob(n, grain, funcJob(fn))
}

// RunJob is Run for a Job.
func (p *Pool) RunJob(n, grain int, job Job) {
	if n <= 0 {
		return
	}
	if grain < 1 {
		grain = 1
	}
	grains := (n + grain - 1) / grain
	threads := min(p.n, grains)
	if threads <= 1 {
		job.Run(0, 0, n)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		job.Run(0, 0, n)
		return
	}
	p.job, p.total, p.grain = job, n, grain
	p.chunks = min(grains, threads*chunksPerThread)
	p.next.Store(0)
	p.pending.Store(int32(threads - 1))
	for _, w := range p.workers[:threads-1] {
		p.publish(w)
	}
	p.work(0)
	for i := 0; p.pending.Load() != 0; i++ {
		if i&63 == 63 {
			runtime.Gosched()
		}
	}
	p.job = nil
}

// work takes chunks until none is left.
func (p *Pool) work(w int) {
	grains := (p.total + p.grain - 1) / p.grain
	for {
		c := int(p.next.Add(1)) - 1
		if c >= p.chunks {
			return
		}
		lo := min(p.total, grains*c/p.chunks*p.grain)
		hi := min(p.total, grains*(c+1)/p.chunks*p.grain)
		p.job.Run(w, lo, hi)
	}
}

func (p *Pool) loop(w *worker) {
	defer p.wg.Done()
	var seen uint64
	for {
		for spun := 0; w.seq.Load() == seen; spun++ {
			if spun < spinIters {
				if spun&255 == 255 {
					runtime.Gosched()
				}
				continue
			}
			// Park. Paired with publish: either publish sees the parked
			// state and sends, or we see the new seq and stay up.
			w.state.Store(1)
			if w.seq.Load() != seen {
				if !w.state.CompareAndSwap(1, 0) {
					<-w.wake
				}
				break
			}
			<-w.wake
			spun = 0
		}
		seen = w.seq.Load()
		if w.quit {
			return
		}
		p.work(w.id)
		p.pending.Add(-1)
	}
}
