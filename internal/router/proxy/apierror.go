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
// forwarding return one, and both front ends answer it as an OpenAI-style error (response).
type apiError struct {
	status int    // HTTP status, also the error's code unless code is set
	typ    string // OpenAI error type
	param  string // the request field at fault, if one
	msg    string
	code   string      // the error's code when it is a name rather than the status ("invalid_api_key")
	header http.Header // set on the response as well (Retry-After, Connection)
}

func (e *apiError) Error() string { return e.msg }

func badRequest(param, msg string) *apiError {
	return &apiError{status: http.StatusBadRequest, typ: invalidRequest, param: param, msg: msg}
}

// response is the answer to a refused request: the HTTP front end writes it (refuse), the EPP
// sends it as Envoy's immediate response (Refusal), so that a client sees the same bytes
// whichever front end it went through.
func (e *apiError) response() (status int, header http.Header, body []byte) {
	header = make(http.Header, len(e.header)+1)
	maps.Copy(header, e.header)
	header.Set("Content-Type", "application/json")
	var code any = e.status
	if e.code != "" {
		code = e.code
	}
	return e.status, header, errorBody(code, e.typ, e.msg, e.param)
}

// Refusal is a request the router answers itself, without an engine: a front end that does not
// forward requests itself (the EPP) sends it back as is.
type Refusal struct {
	Status int
	// Header holds Content-Type and, where they apply, Retry-After, Allow or WWW-Authenticate.
	Header http.Header
	// Body is the OpenAI-style error object, exactly as the HTTP front end writes it.
	Body []byte
}

// refusal turns err into the answer the client gets, counted as answered by the router itself.
// An error that is not an apiError is a fault of the router's (a 500).
func (s *Server) refusal(err error) *Refusal {
	var e *apiError
	if !errors.As(err, &e) {
		e = &apiError{status: http.StatusInternalServerError, typ: serverError, msg: err.Error()}
	}
	s.metrics.requests.WithLabelValues("", strconv.Itoa(e.status)).Inc()
	status, header, body := e.response()
	return &Refusal{Status: status, Header: header, Body: body}
}

// refuse answers a request with err (see refusal).
func (s *Server) refuse(w http.ResponseWriter, err error) {
	r := s.refusal(err)
	maps.Copy(w.Header(), r.Header)
	w.WriteHeader(r.Status)
	_, _ = w.Write(r.Body)
}

// writeError writes an OpenAI-style error body.
func writeError(w http.ResponseWriter, code int, typ, msg, param string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(errorBody(code, typ, msg, param))
}

// errorBody is an OpenAI-style error object, newline-terminated as json.Encoder writes it.
func errorBody(code any, typ, msg, param string) []byte {
	type body struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    any     `json:"code"`
	}
	e := body{Message: msg, Type: typ, Code: code}
	if param != "" {
		e.Param = &param
	}
	b, _ := json.Marshal(map[string]body{"error": e})
	return append(b, '\n')
}
