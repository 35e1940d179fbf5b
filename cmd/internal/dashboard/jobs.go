package dashboard

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"sync"
	"time"
)

// maxJobs bounds the finished jobs remembered for their pages.
const maxJobs = 100

// job is one running or finished action.
type job struct {
	ID, Action, Summary, User string
	// Back links to the page the action came from.
	Back    string
	Started time.Time

	mu       sync.Mutex
	state    jobState
	finished chan struct{}
	cancel   context.CancelFunc
}

// stop cancels the job's context (the action stops after its current
// page) and records who asked.
func (j *job) stop(user string) {
	j.update(func(st *jobState) {
		if st.StoppedBy == "" {
			st.StoppedBy = user
		}
	})
	j.cancel()
}

// jobState is what a job page shows.
type jobState struct {
	Done bool
	// Examined of Total items so far (Total 0: unknown), Changed the items
	// changed (moved, deleted, dead-lettered).
	Examined, Total, Changed int64
	// Message is the outcome once done; Err the error that stopped it.
	Message, Err string
	Finished     time.Time
	// StoppedBy names who stopped the job ("" if nobody did).
	StoppedBy string
}

func (j *job) update(f func(*jobState)) {
	j.mu.Lock()
	defer j.mu.Unlock()
	f(&j.state)
}

func (j *job) snapshot() jobState {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.state
}

// jobs holds the actions started by the dashboard.
type jobs struct {
	wg    sync.WaitGroup
	mu    sync.Mutex
	byID  map[string]*job
	order []string
}

func newJobs() *jobs { return &jobs{byID: map[string]*job{}} }

// start runs fn on a goroutine of its own with ctx (cancelled by Close).
func (js *jobs) start(ctx context.Context, j *job, fn func(ctx context.Context, j *job)) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	j.ID = hex.EncodeToString(b[:])
	j.Started = time.Now()
	j.finished = make(chan struct{})
	ctx, j.cancel = context.WithCancel(ctx)
	js.mu.Lock()
	js.byID[j.ID] = j
	js.order = append(js.order, j.ID)
	for len(js.order) > maxJobs {
		old := js.byID[js.order[0]]
		if old != nil && !old.snapshot().Done {
			break
		}
		delete(js.byID, js.order[0])
		js.order = js.order[1:]
	}
	js.mu.Unlock()
	js.wg.Add(1)
	go func() {
		defer js.wg.Done()
		defer close(j.finished)
		defer j.cancel()
		fn(ctx, j)
	}()
}

func (js *jobs) get(id string) *job {
	js.mu.Lock()
	defer js.mu.Unlock()
	return js.byID[id]
}

// wait waits for every started job to end.
func (js *jobs) wait() { js.wg.Wait() }

// jobPage is the data of the job template.
type jobPage struct {
	page
	J *job
	S jobState
}

// Percent is the progress bar's value (0 to 100).
func (p *jobPage) Percent() int64 {
	if p.S.Done {
		return 100
	}
	if p.S.Total <= 0 {
		return 0
	}
	return min(p.S.Examined*100/p.S.Total, 100)
}

func (s *Server) handleJob(w http.ResponseWriter, r *http.Request) {
	j := s.jobs.get(r.URL.Query().Get("id"))
	if j == nil {
		s.failPage(w, r, http.StatusNotFound, "no such action (the dashboard remembers the last %d)", maxJobs)
		return
	}
	p := &jobPage{page: s.newPage(j.Action, ""), J: j, S: j.snapshot()}
	if isFragment(r) {
		s.render(w, http.StatusOK, "job", "progress", p)
		return
	}
	s.render(w, http.StatusOK, "job", "", p)
}
