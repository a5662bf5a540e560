/*
Copyright 2026 The kvrouter Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package proxy

import (
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"strconv"
)

// OpenAI error types the router answers with.
const (
	invalidRequest = "invalid_request_error"
	serverError    = "server_error"
)

// apiError is a request the router answers itself, without an engine: the steps before
// forwarding return one, and refuse writes it as an OpenAI-style error.
type apiError struct {
	status int    // HTTP status, also the error's code
	typ    string // OpenAI error type
	param  string // the request field at fault, if one
	msg    string
	header http.Header // set on the response as well (Retry-After, Connection)
}

func (e *apiError) Error() string { return e.msg }

func badRequest(param, msg string) *apiError {
	return &apiError{status: http.StatusBadRequest, typ: invalidRequest, param: param, msg: msg}
}

// refuse answers a request with err, counted as answered by the router itself. An error that
// is not an apiError is a fault of the router's (a 500).
func (s *Server) refuse(w http.ResponseWriter, err error) {
	var e *apiError
	if !errors.As(err, &e) {
		e = &apiError{status: http.StatusInternalServerError, typ: serverError, msg: err.Error()}
	}
	maps.Copy(w.Header(), e.header)
	s.metrics.requests.WithLabelValues("", strconv.Itoa(e.status)).Inc()
	writeError(w, e.status, e.typ, e.msg, e.param)
}

// writeError writes an OpenAI-style error body.
func writeError(w http.ResponseWriter, code int, typ, msg, param string) {
	type body struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    int     `json:"code"`
	}
	e := body{Message: msg, Type: typ, Code: code}
	if param != "" {
		e.Param = &param
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]body{"error": e})
}
