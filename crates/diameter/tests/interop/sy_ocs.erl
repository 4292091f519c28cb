%% An OCS on Erlang/OTP's diameter application, for
%% crates/pcrf/tests/erlang_sy.rs: it listens, the PCRF connects to it; it
%% decodes every SLR and STR strictly (a decode error fails the run) and
%% answers the SLR with each counter's status "exhausted"; once the SLA is
%% out it sends an SNR setting the counters "valid" and decodes our SNA
%% strictly; on the STR it answers STA 2001 and stops.
%%
%% Run: erl -noshell -pa DIR -eval 'sy_ocs:main(["PORT"])'
%% Output lines the test reads: "LISTENING", "PEER-UP", "SLR <type>
%% <counter>...", "SUBSCRIBER <imsi>", "SNA <result-code>", "STR <cause>",
%% "SAME-SESSION", "DONE"; any failure prints "FAIL <reason>" and exits 1.

-module(sy_ocs).

-export([main/1]).
%% diameter_app callbacks
-export([peer_up/3, peer_down/3, pick_peer/4, prepare_request/3,
         prepare_retransmit/3, handle_answer/4, handle_error/4,
         handle_request/3]).

-include_lib("diameter/include/diameter.hrl").

-define(SVC, sy_ocs_svc).
-define(SY, 16777302).
-define(TGPP, 10415).
-define(HOST, "ocs.erlang.test").
-define(REALM, "erlang.test").

main([PortStr]) ->
    register(sy_ocs_main, self()),
    try run(list_to_integer(PortStr)) of
        ok ->
            io:format("DONE~n"),
            halt(0)
    catch
        Class:Reason:Stack ->
            io:format("FAIL ~p:~p~n~p~n", [Class, Reason, Stack]),
            halt(1)
    end.

run(Port) ->
    ok = diameter:start(),
    ok = diameter:start_service(?SVC, [
        {'Origin-Host', ?HOST},
        {'Origin-Realm', ?REALM},
        {'Vendor-Id', ?TGPP},
        {'Product-Name', "otp-sy-ocs"},
        {'Supported-Vendor-Id', [?TGPP]},
        {'Auth-Application-Id', [?SY]},
        {decode_format, map},
        {string_decode, false},
        {application, [{alias, sy}, {dictionary, sy}, {module, ?MODULE},
                       {answer_errors, callback}]}
    ]),
    {ok, _} = diameter:add_transport(?SVC, {listen, [
        {transport_module, diameter_tcp},
        {transport_config, [{ip, {127,0,0,1}}, {port, Port}]},
        {strict_mbit, true}
    ]}),
    io:format("LISTENING~n"),
    Sid = receive
        {sla_sent, S} -> S
    after 30000 -> error(no_slr)
    end,
    timer:sleep(300),
    Snr = ['SNR',
        {'Session-Id', Sid},
        {'Auth-Application-Id', ?SY},
        {'Origin-Host', ?HOST},
        {'Origin-Realm', ?REALM},
        {'Destination-Realm', "test.local"},
        {'Destination-Host', "pcrf.test.local"},
        {'Policy-Counter-Status-Report', [
            #{'Policy-Counter-Identifier' => "monthly-data",
              'Policy-Counter-Status' => "valid"}
        ]}
    ],
    case diameter:call(?SVC, sy, Snr, [{timeout, 5000}]) of
        ['SNA' | #{'Result-Code' := [Rc]}] -> io:format("SNA ~p~n", [Rc]);
        Other -> error({no_sna, Other})
    end,
    receive
        {str, StrSid} when StrSid == Sid -> io:format("SAME-SESSION~n");
        {str, Other2} -> error({str_for_another_session, Other2, Sid})
    after 30000 -> error(no_str)
    end,
    %% Let the STA go out before stopping.
    timer:sleep(300),
    ok.

%% diameter_app callbacks

peer_up(_Svc, _Peer, State) ->
    io:format("PEER-UP~n"),
    State.
peer_down(_Svc, _Peer, State) -> State.
pick_peer([Peer | _], _, _Svc, _State) -> {ok, Peer};
pick_peer([], _, _Svc, _State) -> false.
prepare_request(#diameter_packet{msg = Msg}, _Svc, _Peer) -> {send, Msg}.
prepare_retransmit(Pkt, Svc, Peer) -> prepare_request(Pkt, Svc, Peer).

%% Strict: an answer with any decode error is a failure, not an answer.
handle_answer(#diameter_packet{msg = Msg, errors = []}, _Req, _Svc, _Peer) ->
    Msg;
handle_answer(#diameter_packet{msg = Msg, errors = Errors}, _Req, _Svc, _Peer) ->
    io:format("DECODE-ERRORS ~0p~nIN ~0p~n", [Errors, Msg]),
    {error, {decode_errors, Errors}}.

handle_error(Reason, _Req, _Svc, _Peer) -> {error, Reason}.

handle_request(#diameter_packet{msg = [Cmd | Msg], errors = Errors}, _Svc, _Peer)
  when Errors /= [] ->
    io:format("DECODE-ERRORS ~p ~0p~nIN ~0p~n", [Cmd, Errors, Msg]),
    {answer_message, 5004};
handle_request(#diameter_packet{msg = ['SLR' | Slr]}, _Svc, _Peer) ->
    Sid = maps:get('Session-Id', Slr),
    Counters = maps:get('Policy-Counter-Identifier', Slr, []),
    io:format("SLR ~p~s~n", [maps:get('SL-Request-Type', Slr),
                             [[" ", C] || C <- Counters]]),
    lists:foreach(
        fun(#{'Subscription-Id-Type' := 1, 'Subscription-Id-Data' := Imsi}) ->
                io:format("SUBSCRIBER ~s~n", [Imsi]);
           (_) -> ok
        end,
        maps:get('Subscription-Id', Slr, [])),
    sy_ocs_main ! {sla_sent, Sid},
    {reply, ['SLA',
             {'Session-Id', Sid},
             {'Auth-Application-Id', ?SY},
             {'Origin-Host', ?HOST},
             {'Origin-Realm', ?REALM},
             {'Result-Code', [2001]},
             {'Policy-Counter-Status-Report',
              [#{'Policy-Counter-Identifier' => C,
                 'Policy-Counter-Status' => "exhausted"} || C <- Counters]}]};
handle_request(#diameter_packet{msg = ['STR' | Str]}, _Svc, _Peer) ->
    Sid = maps:get('Session-Id', Str),
    io:format("STR ~p~n", [maps:get('Termination-Cause', Str)]),
    sy_ocs_main ! {str, Sid},
    {reply, ['STA',
             {'Session-Id', Sid},
             {'Result-Code', 2001},
             {'Origin-Host', ?HOST},
             {'Origin-Realm', ?REALM}]};
handle_request(_Pkt, _Svc, _Peer) -> {answer_message, 3001}.
