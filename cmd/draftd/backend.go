// The serving backend: a loaded model and the engine that batches drafts on
// it, as internal/server's Backend. serve and demo build it here so that the
// server never loads a model itself; it does not parse flags.
package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/draftd/draftd/internal/engine"
	"github.com/draftd/draftd/internal/kernels"
	"github.com/draftd/draftd/internal/model"
	"github.com/draftd/draftd/internal/server"
)

// strategy names how drafts are made.
const strategy = "model-greedy"

// backendOptions are what the backend is built from.
type backendOptions struct {
	ModelPath string
	// Resolve, when set, turns ModelPath into the path to load (a Hub model
	// id prepared into the cache) while /health answers 503.
	Resolve func(ctx context.Context, model string) (string, error)
	Model   model.Options
	Engine  engine.Options // Observer is set by the server
}

// engineBackend is a model and its engine.
type engineBackend struct {
	*engine.Engine
	m    *model.Model
	info server.BackendInfo
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
		eo := opt.Engine
		eo.Observer = obs
		e, err := engine.New(m, eo)
		if err != nil {
			m.Close()
			return nil, fmt.Errorf("start engine: %w", err)
		}
		o := e.Options()
		kv := "f16"
		if m.KVF32() {
			kv = "f32"
		}
		return &engineBackend{Engine: e, m: m, info: server.BackendInfo{
			Rules: e.Rules(), BOS: m.BOS,
			Architecture: m.Arch, Parameters: m.Params, WeightBytes: m.WeightBytes, WeightTypes: m.TypeCounts,
			VocabSize: m.Vocab, MaxContext: m.MaxContext, Hidden: m.Hidden, Layers: m.Layers,
			Heads: m.Heads, KVHeads: m.KVHeads, HeadDim: m.HeadDim, Model: filepath.Base(m.Path()),
			MaxDraftLen: o.MaxDraftLen, Strategy: strategy, Kernels: kernels.Impl(), Threads: m.Threads(),
			KVCacheType: kv, MaxBatch: o.MaxBatch, MaxQueue: o.MaxQueue,
		}}, nil
	}
}
