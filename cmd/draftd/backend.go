// The serving backend: a loaded model and the engine that batches drafts on
// it, as internal/server's Backend. serve and demo build it here so that the
// server never loads a model itself; it does not parse flags.
package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/draftd/draftd/internal/draft"
	"github.com/draftd/draftd/internal/engine"
	"github.com/draftd/draftd/internal/kernels"
	"github.com/draftd/draftd/internal/model"
	"github.com/draftd/draftd/internal/server"
	"github.com/draftd/draftd/internal/tokenizer"
	"github.com/draftd/draftd/internal/vocabrank"
)

// backendOptions are what the backend is built from.
type backendOptions struct {
	ModelPath string
	// Resolve, when set, turns ModelPath into the path to load (a Hub model
	// id prepared into the cache) while /health answers 503.
	Resolve func(ctx context.Context, model string) (string, error)
	Model   model.Options
	Engine  engine.Options // Observer is set by the server
	Lookup  draft.Options  // of the strategies a request names (zero: draft.DefaultOptions)

	DraftVocab     int    // rows of the trimmed draft LM head; 0: the whole vocabulary
	DraftVocabFile string // the `draftd vocab` ranking it keeps the top of
}

// engineBackend is a model and its engine.
type engineBackend struct {
	*engine.Engine
	m      *model.Model
	info   server.BackendInfo
	lookup draft.Options
}

// DraftStrategy implements server.Backend: the named strategy, with the
// backend's lookup options.
func (b *engineBackend) DraftStrategy(ctx context.Context, tokens []int, n int, name string) (engine.Result, error) {
	s, err := draft.New(name, b.lookup)
	if err != nil {
		return engine.Result{}, err
	}
	return b.Engine.DraftWith(ctx, tokens, n, s)
}

// DraftBatch implements server.Backend: the items with their named
// strategies (the backend's lookup options), in one engine call.
func (b *engineBackend) DraftBatch(ctx context.Context, items []server.BatchItem) ([]engine.Result, []error, error) {
	ei := make([]engine.Item, len(items))
	for i, it := range items {
		var s draft.Strategy
		if it.Strategy != "" {
			var err error
			if s, err = draft.New(it.Strategy, b.lookup); err != nil {
				return nil, nil, err
			}
		}
		ei[i] = it.EngineItem(s)
	}
	return b.Engine.DraftBatch(ctx, ei)
}

var _ server.Backend = (*engineBackend)(nil)

func (b *engineBackend) Info() server.BackendInfo { return b.info }

// Close closes the engine (finishing or failing its work), then the model.
func (b *engineBackend) Close(ctx context.Context) error {
	err := b.Engine.Close(ctx)
	if errors.Is(err, engine.ErrClosed) {
		err = nil
	}
	return errors.Join(err, b.m.Close())
}

// openBackend returns the server's Config.Open for opt.
func openBackend(opt backendOptions) func(context.Context, engine.Observer) (server.Backend, error) {
	return func(ctx context.Context, obs engine.Observer) (server.Backend, error) {
		path := opt.ModelPath
		if opt.Resolve != nil {
			var err error
			if path, err = opt.Resolve(ctx, path); err != nil {
				return nil, fmt.Errorf("prepare model %s: %w", opt.ModelPath, err)
			}
		}
		m, err := model.Load(path, opt.Model)
		if err != nil {
			return nil, fmt.Errorf("load model: %w", err)
		}
		if err := ctx.Err(); err != nil {
			m.Close()
			return nil, err
		}
		if opt.DraftVocab > 0 {
			keep, err := draftVocabIDs(opt.DraftVocabFile, opt.DraftVocab, m.Vocab)
			if err == nil {
				err = m.SetDraftVocab(keep)
			}
			if err != nil {
				m.Close()
				return nil, fmt.Errorf("draft vocabulary: %w", err)
			}
		}
		eo := opt.Engine
		eo.Observer = obs
		e, err := engine.New(m, eo)
		if err != nil {
			m.Close()
			return nil, fmt.Errorf("start engine: %w", err)
		}
		o := e.Options()
		kv := m.KVType().String()
		lookup := opt.Lookup
		if lookup == (draft.Options{}) {
			lookup = draft.DefaultOptions()
		}
		return &engineBackend{Engine: e, m: m, lookup: lookup, info: server.BackendInfo{
			Rules: e.Rules(), BOS: m.BOS,
			Architecture: m.Arch, Parameters: m.Params, WeightBytes: m.WeightBytes, WeightTypes: m.TypeCounts,
			WeightMix: weightMix(m), BitsPerWeight: m.BitsPerWeight(),
			VocabSize: m.Vocab, MaxContext: m.MaxContext, Hidden: m.Hidden, Layers: m.Layers,
			Heads: m.Heads, KVHeads: m.KVHeads, HeadDim: m.HeadDim, Model: filepath.Base(m.Path()),
			MaxDraftLen: o.MaxDraftLen, Strategy: o.Strategy.Name(), Strategies: draft.Names,
			TrustMatch: lookup.Trust, Eager: lookup.Eager, MinMatch: lookup.MinMatch, LookupChoice: lookup.Choice.String(), Kernels: kernels.Impl(), Threads: m.Threads(),
			KVCacheType: kv, MaxBatch: o.MaxBatch, MaxQueue: o.MaxQueue,
			TokenClasses: func() ([]vocabrank.Class, error) {
				tok, err := tokenizer.Load(path) // the GGUF's own, or the HF directory's tokenizer.json
				if err != nil {
					return nil, err
				}
				return vocabrank.Classes(tok)
			},
		}}, nil
	}
}

// weightMix is the model's weights by storage type for /v1/info.
func weightMix(m *model.Model) map[string]server.WeightShare {
	mix := map[string]server.WeightShare{}
	for t, s := range m.Mix() {
		mix[t] = server.WeightShare(s)
	}
	return mix
}
