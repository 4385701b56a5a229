// Tests of DraftBatch: every item equals model.Generate on its own context,
// a bad item fails only itself, the items of one call join the batch at the
// same step boundary, and a group that does not fit in the queue is refused
// whole.
package engine

import (
	"context"
	"errors"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// TestDraftBatchItemsMatchGenerate also runs on the kmix model, whose
// matrices include every K-quant and Q4_1/Q5_0/Q5_1: their tile kernels
// must give a sequence the same result whatever batch it runs in.
func TestDraftBatchItemsMatchGenerate(t *testing.T) {
	for _, path := range []string{tinyModel, "../../testdata/models/tiny-qwen3k-kmix.gguf"} {
		t.Run(filepath.Base(path), func(t *testing.T) { testDraftBatchItemsMatchGenerate(t, path) })
	}
}

func testDraftBatchItemsMatchGenerate(t *testing.T, path string) {
	m := loadModel(t, path)
	// MaxBatch 3 < items: the call runs over several step boundaries.
	e := newEngine(t, m, Options{MaxBatch: 3})
	r := rand.New(rand.NewPCG(3, 4))
	var items []Item
	wantCode := map[int]string{}
	for i := range 9 {
		items = append(items, Item{Tokens: randTokens(r, 1+r.IntN(40), m.Vocab), N: 1 + r.IntN(16)})
		switch i {
		case 2:
			items[i].Tokens[0] = m.Vocab
			wantCode[i] = CodeTokenOutOfRange
		case 5:
			items[i].N = 0
			wantCode[i] = CodeInvalidN
		}
	}
	res, errs, err := e.DraftBatch(context.Background(), items)
	if err != nil {
		t.Fatal(err)
	}
	for i, it := range items {
		if code, bad := wantCode[i]; bad {
			var ie *InputError
			if !errors.As(errs[i], &ie) || ie.Code != code {
				t.Errorf("item %d: have %v; want code %s", i, errs[i], code)
			}
			continue
		}
		if errs[i] != nil {
			t.Errorf("item %d: %v", i, errs[i])
			continue
		}
		checkDraft(t, m, it.Tokens, it.N, res[i].Draft)
	}
}

// sizeObserver stalls the loop in its first step until released and records
// every step's batch size.
type sizeObserver struct {
	mu      sync.Mutex
	sizes   []int
	stepped chan struct{}
	release chan struct{}
	once    sync.Once
}

func (o *sizeObserver) Step(batch, prefill, decode int) {
	o.once.Do(func() {
		close(o.stepped)
		<-o.release
	})
	o.mu.Lock()
	o.sizes = append(o.sizes, batch)
	o.mu.Unlock()
}
func (o *sizeObserver) CacheHit(int)                 {}
func (o *sizeObserver) StepTime(time.Duration, bool) {}
func (o *sizeObserver) BackgroundWait(time.Duration) {}

func TestDraftBatchAdmittedTogether(t *testing.T) {
	m := loadModel(t, tinyModel)
	obs := &sizeObserver{stepped: make(chan struct{}), release: make(chan struct{})}
	e := newEngine(t, m, Options{MaxBatch: 8, MaxQueue: 6, Observer: obs})
	r := rand.New(rand.NewPCG(5, 6))
	first := make(chan error, 1)
	go func() { _, err := e.Draft(context.Background(), randTokens(r, 5, m.Vocab), 32); first <- err }()
	<-obs.stepped // the first request runs; the loop is stalled in its first step
	items := make([]Item, 5)
	for i := range items {
		items[i] = Item{Tokens: randTokens(r, 3+i, m.Vocab), N: 4}
	}
	// Six items do not fit beside the five queued: refused whole.
	over := append(append([]Item(nil), items...), Item{Tokens: []int{1}, N: 1})
	type out struct {
		res  []Result
		errs []error
		err  error
	}
	done := make(chan out, 1)
	go func() {
		res, errs, err := e.DraftBatch(context.Background(), items)
		done <- out{res, errs, err}
	}()
	for e.Stats().QueueDepth != 5 {
		time.Sleep(time.Millisecond)
	}
	if _, _, err := e.DraftBatch(context.Background(), over); !errors.Is(err, ErrQueueFull) {
		t.Errorf("group over the queue: have %v; want ErrQueueFull", err)
	}
	close(obs.release)
	o := <-done
	if o.err != nil {
		t.Fatal(o.err)
	}
	for i, it := range items {
		if o.errs[i] != nil {
			t.Fatalf("item %d: %v", i, o.errs[i])
		}
		checkDraft(t, m, it.Tokens, it.N, o.res[i].Draft)
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	// Step 1 ran the first request alone; step 2 has it and all five items.
	if len(obs.sizes) < 2 || obs.sizes[0] != 1 || obs.sizes[1] != 6 {
		t.Errorf("batch sizes of the first steps: have %v; want [1 6 ...]", obs.sizes[:min(4, len(obs.sizes))])
	}
}
