// The token counts of the traffic a server sees, and GET /v1/vocab, which
// answers them as a `draftd vocab` ranking (internal/vocabrank) for a
// trimmed draft head (serve --draft-vocab N --draft-vocab-file F): what the
// target wrote (the accepted draft tokens and bonus tokens sessions report)
// ranks first, the contexts clients sent break its ties. Counting is a few
// uncontended atomic adds per token of a request, never a lock; the counts
// live as long as the process. This file does not trim the head or touch
// the file system.

package server

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/draftd/draftd/internal/vocabrank"
)

// traffic counts the token ids of the requests a server drafted for.
type traffic struct {
	context  []atomic.Uint32 // (vocab) occurrences in contexts sent (plain requests, session establishment)
	accepted []atomic.Uint32 // (vocab) occurrences in accepted draft + bonus tokens of sessions
	requests atomic.Int64
	ctxTok   atomic.Int64
	accTok   atomic.Int64
	since    time.Time

	classes func() ([]vocabrank.Class, error) // nil: the backend cannot say which ids are special
	mu      sync.Mutex                        // one ranking built at a time (each holds a few MB)
}

func newTraffic(vocab int, classes func() ([]vocabrank.Class, error)) *traffic {
	t := &traffic{context: make([]atomic.Uint32, vocab), accepted: make([]atomic.Uint32, vocab), since: time.Now(), classes: classes}
	if classes != nil {
		t.classes = sync.OnceValues(classes)
	}
	return t
}

// bump adds one to c, saturating at the largest uint32 (a count that high
// still ranks first; it never wraps to 0).
func bump(c *atomic.Uint32) {
	for {
		v := c.Load()
		if v == math.MaxUint32 || c.CompareAndSwap(v, v+1) {
			return
		}
	}
}

// sawContext counts the context of one request (ids already validated).
func (t *traffic) sawContext(ids []int) {
	for _, id := range ids {
		bump(&t.context[id])
	}
	t.requests.Add(1)
	t.ctxTok.Add(int64(len(ids)))
}

// sawAccepted counts the tokens a session request reports the target wrote:
// the accepted draft tokens and the bonus token.
func (t *traffic) sawAccepted(ids []int) {
	for _, id := range ids {
		bump(&t.accepted[id])
	}
	t.requests.Add(1)
	t.accTok.Add(int64(len(ids)))
}

// ranking is the counts so far as a `draftd vocab` ranking of the model's
// tokenizer.
func (t *traffic) ranking(model string) (*vocabrank.File, error) {
	if t.classes == nil {
		return nil, reqErr(CodeNotFound, "GET /v1/vocab needs the model's tokenizer (to keep its special tokens), and this backend has none")
	}
	classes, err := t.classes()
	if err != nil {
		return nil, reqErr(CodeNotFound, "GET /v1/vocab needs the model's tokenizer (to keep its special tokens): "+clip(err.Error()))
	}
	if len(classes) > len(t.context) {
		return nil, reqErr(CodeNotFound, fmt.Sprintf("GET /v1/vocab: the model's tokenizer has %d ids, more than the model's %d rows", len(classes), len(t.context)))
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	acc, ctx := make([]int64, len(classes)), make([]int64, len(classes))
	for id := range classes {
		acc[id], ctx[id] = int64(t.accepted[id].Load()), int64(t.context[id].Load())
	}
	f, err := vocabrank.Build(classes, acc, ctx)
	if err != nil {
		return nil, err
	}
	f.Traffic = &vocabrank.Traffic{Model: model, Since: t.since.UTC().Format(time.RFC3339),
		Requests: t.requests.Load(), ContextTokens: t.ctxTok.Load(), AcceptedTokens: t.accTok.Load()}
	f.Tokens = f.Traffic.ContextTokens + f.Traffic.AcceptedTokens
	return &f, nil
}

func (s *Server) handleVocab(w http.ResponseWriter, r *http.Request, _ *exchange) error {
	b, err := s.backend()
	if err != nil {
		return err
	}
	f, err := b.traffic.ranking(b.model)
	if err != nil {
		return err
	}
	out, err := json.Marshal(f)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, append(out, '\n'))
	return nil
}
