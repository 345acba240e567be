package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/reprise-ml/reprise/engine"
)

// Reloader loads the model at path, of the served model's shapes, into new
// buffers and has the engine serve it (engine.Engine.Reload). Errors reading
// or opening the model wrap ErrReloadModel; a model of other shapes
// engine.ErrShapeMismatch.
type Reloader func(ctx context.Context, path string) (engine.ReloadResult, error)

// ErrReloadModel marks a reload whose model could not be read or opened.
var ErrReloadModel = errors.New("serve: the model to reload cannot be opened")

const pathReload = "/admin/reload"

type reloadRequest struct {
	Model string `json:"model"`
}

type reloadResponse struct {
	Model           string  `json:"model"`
	SlotsUpdated    int     `json:"graph_slots_updated"`
	SlotsRecaptured int     `json:"graph_slots_recaptured"`
	Seconds         float64 `json:"seconds"`
}

// handleReload serves POST /admin/reload {"model": PATH}: new weights of
// identical shapes, served from the next step on. One reload at a time.
func (s *Server) handleReload() http.HandlerFunc {
	var mu sync.Mutex
	return func(w http.ResponseWriter, r *http.Request) {
		body, aerr := s.readBody(w, r)
		if aerr != nil {
			writeError(w, aerr)
			return
		}
		var req reloadRequest
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			writeError(w, badRequest("", codeInvalidJSON, "the body is not {\"model\": PATH}: %v", err))
			return
		}
		if strings.TrimSpace(req.Model) == "" {
			writeError(w, badRequest("model", codeMissing, "\"model\" must name the path of a model of the served model's shapes"))
			return
		}
		mu.Lock()
		res, err := s.opts.Reload(r.Context(), req.Model)
		mu.Unlock()
		switch {
		case errors.Is(err, engine.ErrShapeMismatch):
			writeError(w, &apiError{status: http.StatusConflict, typ: typeInvalidRequest, param: "model", code: "shape_mismatch",
				message: fmt.Sprintf("%s: %v", req.Model, err)})
		case errors.Is(err, ErrReloadModel):
			writeError(w, badRequest("model", codeInvalidValue, "%v", err))
		case err != nil:
			s.log.Error("reload failed", "model", req.Model, "err", err)
			writeError(w, &apiError{status: http.StatusInternalServerError, typ: typeServer, code: "reload_failed",
				message: fmt.Sprintf("reload of %s failed; the old weights are served: %v", req.Model, err)})
		default:
			s.log.Info("model reloaded", "model", req.Model, "graph_slots_updated", res.InPlace, "graph_slots_recaptured", res.Recaptured)
			writeJSON(w, http.StatusOK, reloadResponse{Model: req.Model, SlotsUpdated: res.InPlace, SlotsRecaptured: res.Recaptured,
				Seconds: res.Duration.Seconds()})
		}
	}
}
