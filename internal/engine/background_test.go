// Tests of background (pre-draft) work: a background draft equals the
// on-demand one (also after being taken out of the batch and resumed), a
// request is admitted at the first step boundary after it arrives ahead of
// background work (by the order of forward steps, never by time), a
// request that needs the KV a background sequence holds ends it, and a
// promoted background draft goes ahead of queued requests, and a step of
// background work is stopped between layers for a request and run again.
package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/draftd/draftd/internal/model"
)

// stepInfo is what the gated forward saw of one step: each sequence's first
// position and token count.
type stepInfo struct{ pos, n []int }

// gatedEngine starts an engine whose every forward step is announced on
// started and runs only when the test sends on gate.
func gatedEngine(t *testing.T, m *model.Model, opt Options) (e *Engine, started chan stepInfo, gate chan struct{}) {
	t.Helper()
	started, gate = make(chan stepInfo), make(chan struct{})
	if opt.QueueTimeout == 0 {
		opt.QueueTimeout = MaxQueueTimeout
	}
	// The gated forward never stops a step (these tests are about step
	// boundaries; TestBackgroundStepStopped stops one).
	e, err := newWithForward(m, opt, func(seqs []*model.Seq, _ func() bool) error {
		var si stepInfo
		for _, s := range seqs {
			si.pos, si.n = append(si.pos, s.Pos), append(si.n, len(s.Tokens))
		}
		started <- si
		<-gate
		return m.Forward(seqs)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		done := make(chan struct{})
		go func() {
			for {
				select { // whichever side a failure left the loop on
				case <-started:
				case gate <- struct{}{}:
				case <-done:
					return
				}
			}
		}()
		e.Close(context.Background())
		close(done)
	})
	return e, started, gate
}

type draftOut struct {
	res Result
	err error
}

func goDraft(e *Engine, it Item) chan draftOut {
	ch := make(chan draftOut, 1)
	go func() {
		res, errs, err := e.DraftBatch(context.Background(), []Item{it})
		if err == nil {
			err = errs[0]
		}
		var r Result
		if res != nil {
			r = res[0]
		}
		ch <- draftOut{r, err}
	}()
	return ch
}

// waitFor spins until cond holds (a state of the engine, not a time).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		runtime.Gosched()
	}
}

// TestBackgroundYieldsToRequests: with one batch slot (and with four), a
// background draft of 32 tokens after a context of 100 runs three steps; a
// request (context 30, n 8) then arrives while the fourth step runs. The
// next eight steps must be the request's alone (positions below 100: with
// free slots too, background work never shares a request's step), and only
// then the background draft resumes. Both drafts equal model.Generate. This
// fails if background work were admitted, or kept, beside or ahead of a
// request.
func TestBackgroundYieldsToRequests(t *testing.T) {
	for _, mb := range []int{1, 4} {
		t.Run(fmt.Sprintf("max-batch-%d", mb), func(t *testing.T) { testBackgroundYields(t, mb) })
	}
}

func testBackgroundYields(t *testing.T, maxBatch int) {
	m := loadModel(t, tinyModel)
	e, started, gate := gatedEngine(t, m, Options{MaxBatch: maxBatch})
	r := rand.New(rand.NewPCG(31, 32))
	lowCtx, reqCtx := randTokens(r, 100, m.Vocab), randTokens(r, 30, m.Vocab)
	bg := NewBackground()
	low := goDraft(e, Item{Tokens: lowCtx, N: 32, Background: bg, Alts: true})
	for range 3 {
		<-started
		gate <- struct{}{}
	}
	<-started // the fourth step, held
	req := goDraft(e, Item{Tokens: reqCtx, N: 8})
	waitFor(t, "the request to be queued", func() bool { return e.Stats().QueueDepth == 1 })
	gate <- struct{}{}
	var order []string // "req" or "low", per step after the fourth
	var lowRes, reqRes *draftOut
	for lowRes == nil || reqRes == nil {
		select {
		case si := <-started:
			if len(si.pos) != 1 {
				t.Fatalf("step with %d sequences; want the request or the background draft alone", len(si.pos))
			}
			if si.pos[0] < 100 && !(si.pos[0] == 0 && si.n[0] == 100) {
				order = append(order, "req")
			} else {
				order = append(order, "low")
			}
			gate <- struct{}{}
		case o := <-low:
			lowRes = &o
		case o := <-req:
			reqRes = &o
		}
	}
	if reqRes.err != nil || lowRes.err != nil {
		t.Fatalf("request: %v; background: %v", reqRes.err, lowRes.err)
	}
	checkDraft(t, m, reqCtx, 8, reqRes.res.Draft)
	checkDraft(t, m, lowCtx, 32, lowRes.res.Draft)
	for i, o := range order {
		if want := map[bool]string{true: "req", false: "low"}[i < 8]; o != want {
			t.Fatalf("steps after the request arrived: %v; want 8 of the request's first", order)
		}
	}
	if s := e.Stats(); s.Preemptions != 1 || s.BackgroundTokens != 32 {
		t.Errorf("preemptions %d, background tokens %d; want 1, 32", s.Preemptions, s.BackgroundTokens)
	}
	if n, first := bg.Drafted(); n != 32 || first != lowRes.res.Draft[0] {
		t.Errorf("Drafted() = %d, %d; want 32, %d", n, first, lowRes.res.Draft[0])
	}
	if len(lowRes.res.Alts) != 32 {
		t.Fatalf("%d alts for 32 tokens", len(lowRes.res.Alts))
	}
	for i, a := range lowRes.res.Alts {
		if a.ID == lowRes.res.Draft[i] || a.ID < 0 || a.P <= 0 || a.P > 1 || a.PAlt < 0 || a.PAlt > a.P+1e-3 {
			t.Fatalf("alt %d = %+v for draft token %d", i, a, lowRes.res.Draft[i])
		}
	}
}

// TestBackgroundEvictedForKV: the KV budget holds the background sequence
// (context 100 + 32) or the request (context 100 + 16, another context),
// not both; the request ends the background draft (ErrEvicted) and is
// exact.
func TestBackgroundEvictedForKV(t *testing.T) {
	m := loadModel(t, tinyModel)
	e, started, gate := gatedEngine(t, m, Options{MaxBatch: 2, KVCacheBytes: 12 * int64(m.BlockBytes())})
	r := rand.New(rand.NewPCG(33, 34))
	lowCtx, reqCtx := randTokens(r, 100, m.Vocab), randTokens(r, 100, m.Vocab)
	low := goDraft(e, Item{Tokens: lowCtx, N: 32, Background: NewBackground()})
	<-started
	req := goDraft(e, Item{Tokens: reqCtx, N: 16})
	waitFor(t, "the request to be queued", func() bool { return e.Stats().QueueDepth == 1 })
	gate <- struct{}{}
	var lowRes, reqRes *draftOut
	for lowRes == nil || reqRes == nil {
		select {
		case <-started:
			gate <- struct{}{}
		case o := <-low:
			lowRes = &o
		case o := <-req:
			reqRes = &o
		}
	}
	if !errors.Is(lowRes.err, ErrEvicted) {
		t.Errorf("background draft: %v; want ErrEvicted", lowRes.err)
	}
	if reqRes.err != nil {
		t.Fatal(reqRes.err)
	}
	checkDraft(t, m, reqCtx, 16, reqRes.res.Draft)
	if s := e.Stats(); s.BackgroundEvicts != 1 || s.BackgroundActive != 0 {
		t.Errorf("background evictions %d, active %d; want 1, 0", s.BackgroundEvicts, s.BackgroundActive)
	}
}

// TestBackgroundPromoted: one slot, a request A running, a background
// draft and then a request B waiting; promoting the background draft
// admits it before B. Both equal Generate.
func TestBackgroundPromoted(t *testing.T) {
	m := loadModel(t, tinyModel)
	e, started, gate := gatedEngine(t, m, Options{MaxBatch: 1})
	r := rand.New(rand.NewPCG(35, 36))
	aCtx, lowCtx, bCtx := randTokens(r, 20, m.Vocab), randTokens(r, 60, m.Vocab), randTokens(r, 100, m.Vocab)
	a := goDraft(e, Item{Tokens: aCtx, N: 4})
	<-started
	bg := NewBackground()
	low := goDraft(e, Item{Tokens: lowCtx, N: 4, Background: bg})
	waitFor(t, "the background draft to be queued", func() bool { return e.Stats().BackgroundQueued == 1 })
	b := goDraft(e, Item{Tokens: bCtx, N: 4})
	waitFor(t, "B to be queued", func() bool { return e.Stats().QueueDepth == 1 })
	bg.Promote()
	gate <- struct{}{}
	var prefills []int // context length of each prefill step
	var outs []draftOut
	for len(outs) < 3 {
		select {
		case si := <-started:
			if si.pos[0] == 0 {
				prefills = append(prefills, si.n[0])
			}
			gate <- struct{}{}
		case o := <-a:
			outs = append(outs, o)
			checkDraft(t, m, aCtx, 4, o.res.Draft)
		case o := <-low:
			outs = append(outs, o)
			checkDraft(t, m, lowCtx, 4, o.res.Draft)
		case o := <-b:
			outs = append(outs, o)
			checkDraft(t, m, bCtx, 4, o.res.Draft)
		}
	}
	for _, o := range outs {
		if o.err != nil {
			t.Fatal(o.err)
		}
	}
	if len(prefills) != 2 || prefills[0] != 60 || prefills[1] != 100 {
		t.Errorf("prefills after A: %v; want [60 100] (the promoted draft before B)", prefills)
	}
}

// TestBackgroundStepStopped: a background draft (context 100, 32 tokens)
// runs alone; in its step k (k = 1: the prefill; k = 4: a decode step) the
// forward is held at its second check (after layer 0 wrote its K/V) while a request
// (context 30, n 8) is queued, then goes on. The step must stop there
// (ErrStopped, counted in Stats), the very next forward step must be the
// request's prefill, and both drafts must equal model.Generate: a stopped
// step's partial K/V writes change nothing when it is run again.
func TestBackgroundStepStopped(t *testing.T) {
	for _, k := range []int{1, 4} {
		t.Run(fmt.Sprintf("step-%d", k), func(t *testing.T) { testBackgroundStepStopped(t, k) })
	}
}

func testBackgroundStepStopped(t *testing.T, k int) {
	m := loadModel(t, tinyModel)
	r := rand.New(rand.NewPCG(37, 38))
	lowCtx, reqCtx := randTokens(r, 100, m.Vocab), randTokens(r, 30, m.Vocab)
	reached, resume := make(chan struct{}), make(chan struct{})
	type call struct {
		pos, n    int
		stoppable bool
		err       error
	}
	var calls []call // only the engine goroutine appends; read after both drafts end
	e, err := newWithForward(m, Options{MaxBatch: 4, QueueTimeout: MaxQueueTimeout}, func(seqs []*model.Seq, stop func() bool) error {
		c := call{pos: seqs[0].Pos, n: len(seqs[0].Tokens), stoppable: stop != nil}
		var err error
		if len(calls) == k-1 {
			checks := 0
			err = m.ForwardStop(seqs, func() bool {
				if checks++; checks == 2 {
					reached <- struct{}{}
					<-resume
				}
				return stop != nil && stop()
			})
		} else {
			err = m.ForwardStop(seqs, stop)
		}
		c.err = err
		calls = append(calls, c)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	low := goDraft(e, Item{Tokens: lowCtx, N: 32, Background: NewBackground()})
	<-reached
	req := goDraft(e, Item{Tokens: reqCtx, N: 8})
	waitFor(t, "the request to be queued", func() bool { return e.Stats().QueueDepth == 1 })
	close(resume)
	lowRes, reqRes := <-low, <-req
	if reqRes.err != nil || lowRes.err != nil {
		t.Fatalf("request: %v; background: %v", reqRes.err, lowRes.err)
	}
	checkDraft(t, m, reqCtx, 8, reqRes.res.Draft)
	checkDraft(t, m, lowCtx, 32, lowRes.res.Draft)
	if len(calls) <= k {
		t.Fatalf("%d forward calls", len(calls))
	}
	if c := calls[k-1]; !c.stoppable || !errors.Is(c.err, model.ErrStopped) {
		t.Fatalf("step %d: stoppable %v, error %v; want a stopped background step", k, c.stoppable, c.err)
	}
	if c := calls[k]; c.pos != 0 || c.n != 30 || c.stoppable {
		t.Fatalf("step after the stopped one: position %d, %d tokens, stoppable %v; want the request's prefill (0, 30, false)", c.pos, c.n, c.stoppable)
	}
	if s := e.Stats(); s.BackgroundStops != 1 || s.BackgroundTokens != 32 {
		t.Errorf("stopped steps %d, background tokens %d; want 1, 32", s.BackgroundStops, s.BackgroundTokens)
	}
}

// TestBackgroundDelayed: with BackgroundDelay (an hour here: longer than the
// test), a background draft queued right after a request's last step is
// held back: no forward step starts for it; a second request queued after
// it runs first (its prefill is the next step), and closing the engine
// then fails the held draft with ErrClosed. Without the delay the
// background draft's prefill would be the next step.
func TestBackgroundDelayed(t *testing.T) {
	m := loadModel(t, tinyModel)
	e, started, gate := gatedEngine(t, m, Options{MaxBatch: 4, BackgroundDelay: time.Hour})
	r := rand.New(rand.NewPCG(39, 40))
	aCtx, lowCtx, bCtx := randTokens(r, 20, m.Vocab), randTokens(r, 60, m.Vocab), randTokens(r, 30, m.Vocab)
	a := goDraft(e, Item{Tokens: aCtx, N: 2})
	for range 2 { // A's prefill and its one decode step
		<-started
		gate <- struct{}{}
	}
	if o := <-a; o.err != nil {
		t.Fatal(o.err)
	}
	low := goDraft(e, Item{Tokens: lowCtx, N: 4, Background: NewBackground()})
	waitFor(t, "the background draft to be queued", func() bool {
		select {
		case si := <-started:
			t.Fatalf("a step started within the delay: positions %v, tokens %v", si.pos, si.n)
		default:
		}
		return e.Stats().BackgroundQueued == 1
	})
	b := goDraft(e, Item{Tokens: bCtx, N: 4})
	if si := <-started; si.pos[0] != 0 || si.n[0] != 30 {
		t.Fatalf("next step: positions %v, tokens %v; want B's prefill (0, 30)", si.pos, si.n)
	}
	gate <- struct{}{}
	for range 3 {
		<-started
		gate <- struct{}{}
	}
	o := <-b
	if o.err != nil {
		t.Fatal(o.err)
	}
	checkDraft(t, m, bCtx, 4, o.res.Draft)
	go e.Close(context.Background())
	if o := <-low; !errors.Is(o.err, ErrClosed) {
		t.Fatalf("held background draft: %v; want ErrClosed", o.err)
	}
}
