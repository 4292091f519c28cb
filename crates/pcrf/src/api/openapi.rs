//! The OpenAPI 3.0 description of the API, served at `/v1/openapi.json`.
//! Hand-written so it reads as documentation; a test compares its paths and
//! methods with the router's routes, so the two cannot drift apart.

use serde_json::{json, Value};
use std::sync::OnceLock;

fn error_response(description: &str) -> Value {
    json!({
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    })
}

fn json_response(description: &str, schema: &str) -> Value {
    json!({
        "description": description,
        "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{schema}")}}}
    })
}

fn path_param(name: &str, description: &str) -> Value {
    json!({"name": name, "in": "path", "required": true, "description": description, "schema": {"type": "string"}})
}

fn imsi_param() -> Value {
    path_param("imsi", "IMSI, 5 to 15 digits")
}

fn session_param() -> Value {
    path_param("id", "Session-Id (percent-encoded)")
}

/// `POST /v1/subscribers/batch` (its own function: the document is one
/// `json!` and would otherwise pass the macro's recursion limit).
fn batch_path() -> Value {
    let body = |schema: Value| json!({"schema": schema});
    let array = json!({"type": "array", "maxItems": super::subscribers::MAX_BATCH_ENTRIES, "items": {"$ref": "#/components/schemas/BatchEntry"}});
    let lines = json!({"type": "string", "description": "One BatchEntry as JSON per line; blank lines are skipped"});
    json!({
        "post": {
            "operationId": "putSubscribersBatch",
            "summary": "Create or replace many subscriber profiles in one durable change",
            "description": format!(
                "Every entry is validated as PUT /v1/subscribers/{{imsi}} validates its body, and must name its imsi; IMSIs must be distinct. The first bad entry refuses the whole batch (400, the message starts with \"entry N\", 0-based, and for JSON lines gives the line); otherwise all profiles are written in one store transaction (all or none). At most {} entries; the body limit is [api].max_batch_bytes (default 16 MiB).",
                super::subscribers::MAX_BATCH_ENTRIES
            ),
            "requestBody": {"required": true, "content": {
                "application/json": body(array),
                super::subscribers::NDJSON: body(lines)
            }},
            "responses": {
                "200": json_response("Every profile written", "BatchOutcome"),
                "400": error_response("An entry is invalid (named by index), repeats an IMSI, the body is not JSON, or more than the maximum entries"),
                "401": error_response("Missing or wrong bearer token (only when api.token is set)"),
                "413": error_response("Body larger than [api].max_batch_bytes"),
                "415": error_response("Content-Type is neither application/json nor application/x-ndjson"),
                "503": error_response("Store unavailable: nothing was written")
            }
        }
    })
}

/// The document.
pub fn document() -> Value {
    let unauthorized = error_response("Missing or wrong bearer token (only when api.token is set)");
    let bad = error_response("Invalid input");
    let missing = error_response("No such resource");
    json!({
        "openapi": "3.0.3",
        "info": {
            "title": "PCRF API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Provisioning, session control, policy reload, network state and monitoring of the PCRF. Every error is JSON {\"error\": \"...\"}."
        },
        "security": [{"bearerAuth": []}],
        "paths": {
            "/v1/subscribers/batch": batch_path(),
            "/v1/subscribers/{imsi}": {
                "parameters": [imsi_param()],
                "put": {
                    "operationId": "putSubscriber",
                    "summary": "Create or replace a subscriber profile",
                    "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/SubscriberBody"}}}},
                    "responses": {
                        "200": json_response("Replaced", "Subscriber"),
                        "201": json_response("Created", "Subscriber"),
                        "400": bad, "401": unauthorized,
                        "413": error_response("Body too large"),
                        "415": error_response("Content-Type is not application/json"),
                        "422": error_response("JSON of the wrong shape (unknown field, wrong type)"),
                        "503": error_response("Store unavailable")
                    }
                },
                "get": {
                    "operationId": "getSubscriber",
                    "summary": "Read a subscriber profile",
                    "responses": {"200": json_response("The profile", "Subscriber"), "400": bad, "401": unauthorized, "404": missing}
                },
                "delete": {
                    "operationId": "deleteSubscriber",
                    "summary": "Delete a subscriber profile",
                    "responses": {"204": {"description": "Deleted"}, "400": bad, "401": unauthorized, "404": missing, "503": error_response("Store unavailable")}
                }
            },
            "/v1/sessions": {
                "get": {
                    "operationId": "listSessions",
                    "summary": "List Gx sessions, optionally filtered",
                    "parameters": [
                        {"name": "subscriber", "in": "query", "required": false, "description": "IMSI or MSISDN", "schema": {"type": "string"}},
                        {"name": "apn", "in": "query", "required": false, "description": "Called-Station-Id", "schema": {"type": "string"}},
                        {"name": "peer", "in": "query", "required": false, "description": "The PCEF's Origin-Host", "schema": {"type": "string"}},
                        {"name": "limit", "in": "query", "required": false, "schema": {"type": "integer", "minimum": 1, "maximum": crate::control::MAX_SESSION_LIMIT, "default": crate::control::DEFAULT_SESSION_LIMIT}}
                    ],
                    "responses": {"200": json_response("Matching sessions", "SessionList"), "400": bad, "401": unauthorized}
                }
            },
            "/v1/sessions/{id}": {
                "parameters": [session_param()],
                "get": {
                    "operationId": "getSession",
                    "summary": "A session with its last decision, the decision's inputs and script version",
                    "responses": {"200": json_response("The session", "GxSession"), "400": bad, "401": unauthorized, "404": missing}
                },
                "delete": {
                    "operationId": "releaseSession",
                    "summary": "Release the session: RAR with Session-Release-Cause to its PCEF",
                    "parameters": [
                        {"name": "cause", "in": "query", "required": false, "schema": {"type": "string", "enum": ["UNSPECIFIED_REASON", "UE_SUBSCRIPTION_REASON", "INSUFFICIENT_SERVER_RESOURCES", "IP_CAN_CHANGE", "INSUFFICIENT_BEARER_RESOURCES"], "default": "UNSPECIFIED_REASON"}}
                    ],
                    "responses": {
                        "200": json_response("RAR answered", "ReleaseOutcome"),
                        "400": bad, "401": unauthorized, "404": missing,
                        "409": error_response("Session already closed"),
                        "502": error_response("PCEF not connected or answered with an error"),
                        "504": error_response("No RAA in time")
                    }
                }
            },
            "/v1/sessions/{id}/reauth": {
                "parameters": [session_param()],
                "post": {
                    "operationId": "reauthSession",
                    "summary": "Re-decide the session and push the rule difference in a RAR",
                    "responses": {
                        "200": json_response("Re-decided", "ReauthOutcome"),
                        "400": bad, "401": unauthorized, "404": missing,
                        "409": error_response("Session closed"),
                        "502": error_response("PCEF not connected or answered with an error"),
                        "504": error_response("No RAA in time")
                    }
                }
            },
            "/v1/policy/reload": {
                "post": {
                    "operationId": "reloadPolicy",
                    "summary": "Load, check and swap in the policy script",
                    "responses": {
                        "200": json_response("New script serving", "Reloaded"),
                        "401": unauthorized,
                        "422": json_response("Script refused; the old one keeps serving", "Error")
                    }
                }
            },
            "/v1/subscribers/{imsi}/usage": {
                "parameters": [imsi_param()],
                "get": {
                    "operationId": "getUsage",
                    "summary": "A subscriber's accumulators (used, allowance, period), the last report per Monitoring-Key",
                    "responses": {"200": json_response("Usage", "Usage"), "400": bad, "401": unauthorized, "404": missing}
                }
            },
            "/v1/subscribers/{imsi}/sessions": {
                "parameters": [imsi_param()],
                "get": {
                    "operationId": "getSubscriberSessions",
                    "summary": "A subscriber's open Gx sessions with what is bound to them (Rx AF sessions with their media and rules)",
                    "responses": {"200": json_response("Sessions", "SubscriberSessions"), "400": bad, "401": unauthorized, "404": missing}
                }
            },
            "/v1/subscribers/{imsi}/topup": {
                "parameters": [imsi_param()],
                "post": {
                    "operationId": "topUp",
                    "summary": "Add octets to this period's allowance of one accumulator; the subscriber's sessions are re-decided (RAR where the decision changed)",
                    "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/TopUp"}}}},
                    "responses": {"200": json_response("Topped up", "UsageChange"), "400": bad, "401": unauthorized, "404": missing, "409": error_response("Usage monitoring is off"), "415": error_response("Content-Type is not application/json"), "422": error_response("JSON of the wrong shape"), "503": error_response("Store unavailable")}
                }
            },
            "/v1/subscribers/{imsi}/usage/reset": {
                "parameters": [imsi_param()],
                "post": {
                    "operationId": "resetUsage",
                    "summary": "Start a new period now for one accumulator ({} for all); the subscriber's sessions are re-decided and asked for a usage report",
                    "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/UsageReset"}}}},
                    "responses": {"200": json_response("Reset", "UsageChange"), "400": bad, "401": unauthorized, "404": missing, "409": error_response("Usage monitoring is off"), "415": error_response("Content-Type is not application/json"), "422": error_response("JSON of the wrong shape"), "503": error_response("Store unavailable")}
                }
            },
            "/v1/cells/{cell}/congestion": {
                "parameters": [path_param("cell", "ECGI as 14 hex digits, as in 3GPP-User-Location-Info")],
                "put": {
                    "operationId": "putCellCongestion",
                    "summary": "Set a cell's congestion level (0 = none); the sessions located there are re-decided, spread over [usage].spread_secs",
                    "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Congestion"}}}},
                    "responses": {"200": json_response("Set", "CellState"), "400": bad, "401": unauthorized, "415": error_response("Content-Type is not application/json"), "422": error_response("JSON of the wrong shape")}
                }
            },
            "/v1/health": {
                "get": {
                    "operationId": "health",
                    "summary": "Liveness (never needs a token)",
                    "security": [],
                    "responses": {"200": json_response("Alive", "Health")}
                }
            },
            "/v1/ready": {
                "get": {
                    "operationId": "ready",
                    "summary": "Readiness: the store is writable",
                    "responses": {"200": json_response("Ready", "Ready"), "401": unauthorized, "503": json_response("Not ready, with the reason", "Ready")}
                }
            },
            "/v1/config": {
                "get": {
                    "operationId": "config",
                    "summary": "Checksum of the running configuration",
                    "responses": {"200": json_response("Checksum", "ConfigInfo"), "401": unauthorized}
                }
            },
            "/v1/debug/query-profiler": {
                "post": {
                    "operationId": "switchQueryProfiler",
                    "summary": "Switch the store's query profiler on (new window) or off (figures kept); PostgreSQL store only",
                    "requestBody": {"required": true, "content": {"application/json": {"schema": {"type": "object", "required": ["enabled"], "properties": {"enabled": {"type": "boolean"}}, "additionalProperties": false}}}},
                    "responses": {"200": {"description": "The profiler's state", "content": {"application/json": {"schema": {"type": "object", "properties": {"enabled": {"type": "boolean"}}}}}}, "400": {"description": "Bad body"}, "401": unauthorized, "409": {"description": "The store has no profiler (embedded SQLite)"}}
                }
            },
            "/v1/debug/queries": {
                "get": {
                    "operationId": "queries",
                    "summary": "Per statement: calls, calls/s, execution and fetch time (µs), rows, share of database time; costliest first",
                    "parameters": [{"name": "top", "in": "query", "required": false, "schema": {"type": "integer", "minimum": 1, "default": 15}}],
                    "responses": {"200": {"description": "The profile", "content": {"application/json": {"schema": {"type": "object"}}}}, "401": unauthorized, "409": {"description": "The store has no profiler (embedded SQLite)"}}
                }
            },
            "/v1/openapi.json": {
                "get": {
                    "operationId": "openapi",
                    "summary": "This document",
                    "responses": {"200": {"description": "OpenAPI 3.0 document", "content": {"application/json": {"schema": {"type": "object"}}}}, "401": unauthorized}
                }
            },
            "/metrics": {
                "get": {
                    "operationId": "metrics",
                    "summary": "Prometheus metrics (text format 0.0.4)",
                    "responses": {"200": {"description": "The scrape", "content": {"text/plain": {"schema": {"type": "string"}}}}, "401": unauthorized}
                }
            }
        },
        "components": {
            "securitySchemes": {"bearerAuth": {"type": "http", "scheme": "bearer"}},
            "schemas": schemas()
        }
    })
}

fn schemas() -> Value {
    let string_list = json!({"type": "array", "items": {"type": "string"}});
    // Sd (docs/sd.md); built apart to stay under json!'s recursion limit.
    let adc_rules = json!({"type": "array", "description": "ADC rules for the TDF over Sd", "items": {"type": "object", "properties": {"name": {"type": "string"}, "base": {"type": "string"}, "application": {"type": "string"}, "monitoring_key": {"type": "string"}}}});
    let tdf_session = json!({"type": "object", "description": "The TDF (Sd) session bound to this one", "properties": {"id": {"type": "string"}, "mode": {"type": "string", "enum": ["solicited", "unsolicited"]}, "host": {"type": "string"}, "realm": {"type": "string"}, "installed": {"type": "array", "items": {"type": "object"}}, "running": string_list}});
    let opt_string = json!({"type": "string", "nullable": true});
    let opt_int = json!({"type": "integer", "nullable": true});
    json!({
        "Error": {
            "type": "object", "required": ["error"],
            "properties": {"error": {"type": "string"}, "line": {"type": "integer", "description": "Policy script line, for a refused reload"}}
        },
        "Subscriber": {
            "type": "object", "required": ["imsi", "services", "attributes"],
            "properties": {
                "imsi": {"type": "string", "pattern": "^[0-9]{5,15}$"},
                "msisdn": {"type": "string", "pattern": "^[0-9]{5,15}$"},
                "plan": {"type": "string"},
                "services": string_list,
                "attributes": {"type": "object", "additionalProperties": true},
                "billing_day": {"type": "integer", "minimum": 1, "maximum": 28},
                "quotas": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}, "description": "Octets per period by accumulator"}
            }
        },
        "SubscriberBody": {
            "type": "object", "additionalProperties": false,
            "properties": {
                "imsi": {"type": "string", "description": "Optional; must equal the path's IMSI"},
                "msisdn": {"type": "string", "pattern": "^[0-9]{5,15}$"},
                "plan": {"type": "string", "maxLength": 128},
                "services": {"type": "array", "items": {"type": "string", "maxLength": 128}, "maxItems": 256},
                "attributes": {"type": "object", "additionalProperties": true, "maxProperties": 256},
                "billing_day": {"type": "integer", "minimum": 1, "maximum": 28, "description": "Day of the month monthly accumulators reset; the usage file's default when absent"},
                "quotas": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}, "description": "Octets per period by accumulator; overrides the plan's quota"}
            }
        },
        "BatchEntry": {
            "allOf": [{"$ref": "#/components/schemas/SubscriberBody"}, {"type": "object", "required": ["imsi"], "properties": {"imsi": {"type": "string", "pattern": "^[0-9]{5,15}$"}}}]
        },
        "BatchOutcome": {
            "type": "object", "required": ["created", "updated"],
            "properties": {
                "created": {"type": "integer", "description": "Profiles that did not exist before"},
                "updated": {"type": "integer", "description": "Profiles that existed and were replaced"}
            }
        },
        "Decision": {
            "type": "object",
            "description": "PCC rules and QoS as decided by the policy (see docs/policy.md)",
            "properties": {
                "rules": string_list, "base_names": string_list,
                "definitions": {"type": "array", "items": {"type": "object"}},
                "apn_ambr": {"type": "object", "properties": {"ul": {"type": "integer"}, "dl": {"type": "integer"}}},
                "default_bearer_qos": {"type": "object"},
                "event_triggers": {"type": "array", "items": {"type": "integer"}},
                "revalidation_secs": {"type": "integer"},
                "reject": {"type": "object"},
                "monitoring": {"type": "array", "items": {"type": "string"}},
                "adc": adc_rules,
                "spending_counters": {"type": "array", "items": {"type": "string"}, "description": "Sy Policy-Counter-Identifiers the policy asked the OCS about (docs/sy.md)"}
            }
        },
        "DecisionRecord": {
            "type": "object",
            "properties": {
                "input_hash": {"type": "integer"},
                "script_version": {"type": "integer"},
                "decision": {"$ref": "#/components/schemas/Decision"},
                "inputs": {"type": "object", "description": "Everything the policy saw"},
                "at_ms": {"type": "integer", "description": "Unix milliseconds"}
            }
        },
        "GxSession": {
            "type": "object",
            "properties": {
                "id": {"type": "string"},
                "state": {"type": "string", "enum": ["open", "closed"]},
                "subscriber": {"type": "string"},
                "imsi": opt_string, "msisdn": opt_string,
                "pcef_host": {"type": "string"}, "pcef_realm": {"type": "string"},
                "apn": opt_string, "ue_ipv4": opt_string, "ue_ipv6_prefix": opt_string,
                "rat_type": opt_int, "ip_can_type": opt_int,
                "location": opt_string, "ms_timezone": opt_string, "device": opt_string,
                "supported_features": {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}},
                "installed": {"$ref": "#/components/schemas/Decision"},
                "rule_failures": {"type": "array", "items": {"type": "object", "properties": {"rule": {"type": "string"}, "status": {"type": "integer"}, "code": opt_int}}},
                "tdf": tdf_session,
                "last_request_number": {"type": "integer"},
                "last_decision": {"allOf": [{"$ref": "#/components/schemas/DecisionRecord"}], "nullable": true},
                "af": {"type": "array", "description": "Rx (AF) sessions bound to this one", "items": {"$ref": "#/components/schemas/AfSession"}},
                "sy": {"type": "object", "description": "The subscriber's Sy session as of this record's last write (docs/sy.md): session_id, open, ocs_host, counters {id: {status, pending}}, refused, updated_ms"},
                "created_ms": {"type": "integer"}, "updated_ms": {"type": "integer"}, "closed_ms": opt_int
            }
        },
        "AfSession": {
            "type": "object", "required": ["id", "af_host", "af_realm"],
            "properties": {
                "id": {"type": "string", "description": "Rx Session-Id"},
                "af_host": {"type": "string"}, "af_realm": {"type": "string"},
                "application": opt_string, "charging_id": opt_string, "service_urn": opt_string,
                "specific_actions": {"type": "array", "items": {"type": "integer"}},
                "media": {"type": "array", "items": {"type": "object", "description": "Media-Component-Description: number, media_type, max_ul, max_dl, rr_bandwidth, rs_bandwidth, flow_status, codec_data, sub_components (flow_number, flows, flow_usage, flow_status)"}},
                "rules": {"type": "array", "items": {"type": "object", "description": "Charging-Rule-Definition installed for this AF session"}},
                "created_ms": {"type": "integer"}, "updated_ms": {"type": "integer"}
            }
        },
        "SubscriberSessions": {
            "type": "object", "required": ["subscriber", "sessions"],
            "properties": {
                "subscriber": {"type": "string"},
                "sessions": {"type": "array", "items": {"$ref": "#/components/schemas/GxSession"}}
            }
        },
        "SessionList": {
            "type": "object", "required": ["sessions", "truncated"],
            "properties": {
                "sessions": {"type": "array", "items": {"$ref": "#/components/schemas/GxSession"}},
                "truncated": {"type": "boolean", "description": "More sessions matched than limit"}
            }
        },
        "ReauthOutcome": {
            "type": "object", "required": ["rar_sent", "script_version"],
            "properties": {
                "rar_sent": {"type": "boolean", "description": "False when nothing changed"},
                "result_code": {"type": "integer", "description": "The RAA's (Experimental-)Result-Code"},
                "installed": string_list, "removed": string_list,
                "script_version": {"type": "string", "pattern": "^[0-9a-f]{16}$"}
            }
        },
        "ReleaseOutcome": {
            "type": "object",
            "properties": {"result_code": {"type": "integer", "description": "The RAA's (Experimental-)Result-Code"}}
        },
        "Reloaded": {"type": "object", "required": ["version"], "properties": {"version": {"type": "string", "pattern": "^[0-9a-f]{16}$", "description": "Version (hash) of the script now serving, as logged"}}},
        "Congestion": {
            "type": "object", "required": ["congestion"], "additionalProperties": false,
            "properties": {"congestion": {"type": "integer", "minimum": 0, "maximum": super::network::MAX_CONGESTION}}
        },
        "CellState": {"type": "object", "properties": {"cell": {"type": "string"}, "congestion": {"type": "integer"}, "sessions": {"type": "integer", "description": "Open sessions in the cell, re-decided over the spread window"}}},
        "TopUp": {
            "type": "object", "required": ["accumulator", "octets"], "additionalProperties": false,
            "properties": {"accumulator": {"type": "string"}, "octets": {"type": "integer", "minimum": 1, "maximum": super::usage::MAX_TOPUP_OCTETS}}
        },
        "UsageReset": {"type": "object", "additionalProperties": false, "properties": {"accumulator": {"type": "string", "description": "Absent: every accumulator"}}},
        "ServiceUnits": {"type": "object", "properties": {"total": {"type": "integer"}, "input": {"type": "integer"}, "output": {"type": "integer"}, "time": {"type": "integer"}}},
        "Accumulator": {
            "type": "object",
            "properties": {
                "reset": {"type": "string", "enum": ["never", "daily", "weekly", "monthly"]},
                "used": {"type": "integer", "description": "Octets counted in this period"},
                "topup": {"type": "integer"},
                "quota": {"type": "integer", "description": "Subscriber's or plan's quota; absent: none"},
                "allowance": {"type": "integer", "description": "quota + topup"},
                "remaining": {"type": "integer"},
                "exhausted": {"type": "boolean"},
                "period_start": {"type": "string", "format": "date-time"},
                "period_end": {"type": "string", "format": "date-time"}
            }
        },
        "Usage": {
            "type": "object",
            "properties": {
                "subscriber": {"type": "string"},
                "billing_day": {"type": "integer"},
                "accumulators": {"type": "object", "additionalProperties": {"$ref": "#/components/schemas/Accumulator"}},
                "last_reports": {"type": "object", "additionalProperties": {"type": "object", "properties": {"at": {"type": "string", "format": "date-time"}, "session": {"type": "string"}, "used": {"$ref": "#/components/schemas/ServiceUnits"}}}},
                "unknown_key_reports": {"type": "integer"},
                "usage_config": {"type": "string", "description": "Checksum of the usage file"}
            }
        },
        "UsageChange": {
            "type": "object",
            "properties": {
                "usage": {"$ref": "#/components/schemas/Usage"},
                "sessions": {"type": "integer"}, "rar_sent": {"type": "integer"}, "rar_failed": {"type": "integer"}
            }
        },
        "Health": {"type": "object", "properties": {"status": {"type": "string", "enum": ["ok"]}}},
        "Ready": {"type": "object", "required": ["ready"], "properties": {"ready": {"type": "boolean"}, "error": {"type": "string"}}},
        "ConfigInfo": {"type": "object", "properties": {"checksum": {"type": "string"}}}
    })
}

/// The document as bytes, built once.
pub fn document_bytes() -> &'static [u8] {
    static DOC: OnceLock<Vec<u8>> = OnceLock::new();
    DOC.get_or_init(|| serde_json::to_vec_pretty(&document()).unwrap_or_default())
}

/// `GET /v1/openapi.json`.
pub async fn serve_document() -> axum::response::Response {
    use axum::response::IntoResponse;
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        document_bytes(),
    )
        .into_response()
}
