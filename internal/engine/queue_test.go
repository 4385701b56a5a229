package engine

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/draftd/draftd/internal/kvcache"
)

// TestCancelWhileQueuedLeavesQueue: requests whose callers give up while
// they wait leave the queue as Draft returns — the depth drops, their
// places take new requests — and a request that can never fit the KV budget
// fails before it queues, while the batch is busy (issue 20).
func TestCancelWhileQueuedLeavesQueue(t *testing.T) {
	m := loadModel(t, tinyModel)
	obs := &blockingObserver{stepped: make(chan struct{}), release: make(chan struct{})}
	const blocks = 4
	e := newEngine(t, m, Options{MaxBatch: 1, MaxQueue: 2, Observer: obs, KVCacheBytes: blocks * int64(m.BlockBytes())})
	r := rand.New(rand.NewPCG(31, 32))
	a := randTokens(r, 10, m.Vocab)
	done := make(chan error, 3)
	go func() {
		res, err := e.Draft(context.Background(), a, 8)
		checkDraft(t, m, a, 8, res.Draft)
		done <- err
	}()
	<-obs.stepped // a holds the only batch slot; the loop is stalled

	type gone struct {
		cancel context.CancelFunc
		err    chan error
	}
	var waiting []gone
	for i := range 2 {
		ctx, cancel := context.WithCancel(context.Background())
		g := gone{cancel, make(chan error, 1)}
		toks := randTokens(r, 5+i, m.Vocab)
		go func() { _, err := e.Draft(ctx, toks, 4); g.err <- err }()
		waiting = append(waiting, g)
	}
	for e.Stats().QueueDepth != 2 {
		time.Sleep(time.Millisecond)
	}
	for _, g := range waiting {
		g.cancel()
		if err := <-g.err; !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled while queued: have %v; want context.Canceled", err)
		}
	}
	if d := e.Stats().QueueDepth; d != 0 {
		t.Errorf("queue depth %d once both cancelled requests returned; want 0", d)
	}
	over := randTokens(r, blocks*kvcache.BlockSize, m.Vocab)
	var ie *InputError
	if _, err := e.Draft(context.Background(), over, 4); !errors.As(err, &ie) || ie.Code != CodeContextOverKV {
		t.Errorf("over the KV budget while busy: have %v; want %s at once", err, CodeContextOverKV)
	}
	b, c := randTokens(r, 7, m.Vocab), randTokens(r, 9, m.Vocab)
	for _, ctx := range [][]int{b, c} {
		go func() {
			res, err := e.Draft(context.Background(), ctx, 4)
			checkDraft(t, m, ctx, 4, res.Draft)
			done <- err
		}()
	}
	for e.Stats().QueueDepth != 2 {
		time.Sleep(time.Millisecond)
	}
	close(obs.release)
	for range 3 {
		if err := <-done; err != nil {
			t.Errorf("request: %v", err)
		}
	}
}
