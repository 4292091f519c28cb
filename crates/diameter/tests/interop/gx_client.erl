%% A Gx client (an emulated PCEF) on Erlang/OTP's diameter application, for
%% tests/erlang_gx.rs: it connects to the Rust server, sends one CCR-I that
%% OTP encodes from known values, decodes the CCA strictly (any decode error
%% fails) and prints what the test asserts, then waits for the server's RAR,
%% answers it with an RAA (2001 only if it decoded without error), and
%% disconnects (DPR/DPA).
%%
%% Run: erl -noshell -pa DIR -eval 'gx_client:main(["127.0.0.1", "PORT"])'
%% Output lines the test reads: "PEER-UP", "RESULT-CODE <n>", "RULE <name>",
%% "RULE-QCI <n>", "PREDEFINED <name>", "AMBR <ul> <dl>", "CCA <decoded map>",
%% "RAR-REMOVE <name>", "RAR-INSTALL <name>", "DONE"; any failure prints "FAIL <reason>" and exits 1.

-module(gx_client).

-export([main/1]).
%% diameter_app callbacks
-export([peer_up/3, peer_down/3, pick_peer/4, prepare_request/3,
         prepare_retransmit/3, handle_answer/4, handle_error/4,
         handle_request/3]).

-include_lib("diameter/include/diameter.hrl").

-define(SVC, gx_client_svc).
-define(GX, 16777238).
-define(TGPP, 10415).

main([Host, PortStr]) ->
    register(gx_client_main, self()),
    try run(Host, list_to_integer(PortStr)) of
        ok ->
            io:format("DONE~n"),
            halt(0)
    catch
        Class:Reason:Stack ->
            io:format("FAIL ~p:~p~n~p~n", [Class, Reason, Stack]),
            halt(1)
    end.

run(Host, Port) ->
    ok = diameter:start(),
    {ok, Addr} = inet:parse_address(Host),
    ok = diameter:start_service(?SVC, [
        {'Origin-Host', "pcef.erlang.test"},
        {'Origin-Realm', "erlang.test"},
        {'Vendor-Id', ?TGPP},
        {'Product-Name', "otp-gx-client"},
        {'Supported-Vendor-Id', [?TGPP]},
        {'Auth-Application-Id', [?GX]},
        {decode_format, map},
        {string_decode, false},
        {application, [{alias, gx}, {dictionary, gx}, {module, ?MODULE}]}
    ]),
    true = diameter:subscribe(?SVC),
    {ok, _} = diameter:add_transport(?SVC, {connect, [
        {transport_module, diameter_tcp},
        {transport_config, [{raddr, Addr}, {rport, Port}, {ip, {127,0,0,1}}]},
        {connect_timer, 5000},
        {strict_mbit, true}
    ]}),
    ok = wait_up(10000),
    io:format("PEER-UP~n"),
    Ccr = ['CCR',
        {'Session-Id', "pcef.erlang.test;1767225600;1"},
        {'Auth-Application-Id', ?GX},
        {'Origin-Host', "pcef.erlang.test"},
        {'Origin-Realm', "erlang.test"},
        {'Destination-Realm', "pcrf.test"},
        {'CC-Request-Type', 1},
        {'CC-Request-Number', 0},
        {'Subscription-Id', [
            #{'Subscription-Id-Type' => 1, 'Subscription-Id-Data' => "001010123456789"},
            #{'Subscription-Id-Type' => 0, 'Subscription-Id-Data' => "33612345678"}
        ]},
        {'Supported-Features', [
            #{'Vendor-Id' => ?TGPP, 'Feature-List-ID' => 1, 'Feature-List' => 3}
        ]},
        {'Framed-IP-Address', [<<10, 45, 0, 7>>]},
        {'IP-CAN-Type', [5]},
        {'RAT-Type', [1004]},
        {'User-Equipment-Info', [#{
            'User-Equipment-Info-Type' => 0,
            'User-Equipment-Info-Value' => <<"3569870123456701">>
        }]},
        {'QoS-Information', [#{
            'APN-Aggregate-Max-Bitrate-UL' => 50000000,
            'APN-Aggregate-Max-Bitrate-DL' => 150000000
        }]},
        {'Called-Station-Id', ["internet.apn"]}
    ],
    case diameter:call(?SVC, gx, Ccr, [{timeout, 5000}]) of
        ['CCA' | Cca] when is_map(Cca) ->
            report(Cca);
        Other ->
            error({no_cca, Other})
    end,
    receive
        {rar, Rar} -> report_rar(Rar)
    after 10000 -> error(no_rar)
    end,
    ok = diameter:remove_transport(?SVC, true),
    ok = wait_down(10000),
    ok = diameter:stop_service(?SVC),
    ok.

report(Cca) ->
    io:format("CCA ~0p~n", [Cca]),
    case Cca of
        #{'Result-Code' := [Rc]} -> io:format("RESULT-CODE ~p~n", [Rc]);
        _ -> ok
    end,
    Installs = maps:get('Charging-Rule-Install', Cca, []),
    lists:foreach(
        fun(Cri) ->
            lists:foreach(
                fun(Def) ->
                    io:format("RULE ~s~n", [maps:get('Charging-Rule-Name', Def)]),
                    case maps:get('QoS-Information', Def, []) of
                        [Q] -> io:format("RULE-QCI ~p~n", [opt('QoS-Class-Identifier', Q)]);
                        _ -> ok
                    end
                end,
                maps:get('Charging-Rule-Definition', Cri, [])),
            lists:foreach(
                fun(Name) -> io:format("PREDEFINED ~s~n", [Name]) end,
                maps:get('Charging-Rule-Name', Cri, []))
        end,
        Installs),
    case maps:get('QoS-Information', Cca, []) of
        [Qos] ->
            io:format("AMBR ~p ~p~n", [opt('APN-Aggregate-Max-Bitrate-UL', Qos),
                                       opt('APN-Aggregate-Max-Bitrate-DL', Qos)]);
        _ -> ok
    end,
    ok.

report_rar(Rar) ->
    io:format("RAR ~0p~n", [Rar]),
    lists:foreach(
        fun(Crr) ->
            lists:foreach(fun(N) -> io:format("RAR-REMOVE ~s~n", [N]) end,
                          maps:get('Charging-Rule-Name', Crr, []))
        end,
        maps:get('Charging-Rule-Remove', Rar, [])),
    lists:foreach(
        fun(Cri) ->
            lists:foreach(
                fun(Def) -> io:format("RAR-INSTALL ~s~n", [maps:get('Charging-Rule-Name', Def)]) end,
                maps:get('Charging-Rule-Definition', Cri, []))
        end,
        maps:get('Charging-Rule-Install', Rar, [])),
    ok.

%% An optional AVP decodes to a list of zero or one value.
opt(Name, Map) ->
    case maps:get(Name, Map, []) of
        [V] -> V;
        [] -> absent
    end.

wait_up(Timeout) ->
    receive
        #diameter_event{service = ?SVC, info = {up, _, _, _, _}} -> ok;
        #diameter_event{service = ?SVC, info = {up, _, _, _}} -> ok;
        #diameter_event{service = ?SVC, info = Info} ->
            io:format("EVENT ~0p~n", [Info]),
            wait_up(Timeout)
    after Timeout -> error(peer_not_up)
    end.

wait_down(Timeout) ->
    receive
        #diameter_event{service = ?SVC, info = {down, _, _, _}} -> ok;
        #diameter_event{service = ?SVC, info = {closed, _, _, _}} -> ok;
        #diameter_event{service = ?SVC, info = Info} ->
            io:format("EVENT ~0p~n", [Info]),
            wait_down(Timeout)
    after Timeout -> error(peer_not_down)
    end.

%% diameter_app callbacks

peer_up(_Svc, _Peer, State) -> State.
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
%% The server's RAR: answered 2001 when it decoded without error, an error
%% Result-Code otherwise (OTP puts the code of the first decode error, e.g.
%% 5014, in place of our 5004). The test expects 2001.
handle_request(#diameter_packet{msg = ['RAR' | Rar], errors = Errors}, _Svc, _Peer) ->
    Rc = case Errors of
        [] ->
            gx_client_main ! {rar, Rar},
            2001;
        _ ->
            io:format("RAR-DECODE-ERRORS ~0p~nIN ~0p~n", [Errors, Rar]),
            5004
    end,
    {reply, ['RAA',
             {'Session-Id', maps:get('Session-Id', Rar)},
             {'Origin-Host', "pcef.erlang.test"},
             {'Origin-Realm', "erlang.test"},
             {'Result-Code', [Rc]}]};
handle_request(_Pkt, _Svc, _Peer) -> {answer_message, 3001}.
