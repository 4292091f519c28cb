-- default.lua: the example consumer-plan policy shipped with the PCRF.
--
-- What it decides (see docs/policy.md for the whole API):
--   * every subscriber gets the predefined rule "internet" and the rule base
--     "consumer", with an APN-AMBR set by plan;
--   * 01:00-06:00 local time the downlink AMBR is boosted (night boost);
--   * subscribers with the "vip" service get a dynamic GBR rule for the VIP
--     video service (dropped if the PCEF reported it failed to install it);
--   * attribute blocked = true   -> the session is rejected (5003);
--     attribute suspended = true -> only the top-up redirect rule (unpaid bill);
--   * unknown subscribers (when the server is configured to apply the default
--     policy to them) get a small guest profile;
--   * a congested cell (network.congestion >= 2) halves the downlink AMBR of
--     plans without a congestion guarantee;
--   * usage is monitored under the keys "total" (the whole session) and
--     "vip" (the VIP rule), counted into the accumulators of the usage file
--     (config/usage.toml); once the monthly allowance is used up the session
--     is throttled ("throttled" rule instead of "internet", a low APN-AMBR)
--     until a top-up or the monthly reset restores it;
--   * subscribers with the "video-detect" service get an ADC rule at the TDF
--     (Sd, docs/sd.md) detecting "video-streaming", monitored under the key
--     "video"; while the TDF reports that application running, the PCEF
--     gets the predefined rule "video-optimized" as well;
--   * Sy (when an OCS is configured): known subscribers subscribe the OCS
--     policy counter "monthly-data"; while the OCS reports it "exhausted"
--     the session is throttled the same way. A status the OCS could not
--     give ("unknown": no OCS up or no answer in time) does not throttle.
--   * Rx (VoLTE): this script defines no authorize_media(input), so the
--     built-in default_authorize_media turns an AF's media into rules
--     (audio QCI 1 GBR, video QCI 2 GBR, IMS signalling QCI 5); define
--     authorize_media to change that (docs/rx.md, docs/policy.md).
--
-- Rules for policy authors: decide() must depend on its input only (the
-- server skips it when the input did not change), so no os.time, no random,
-- no state kept between calls; iterate with ipairs or sorted keys.
-- Bit rates are whole numbers of bit/s: prefer integer arithmetic (5 * MBPS).
--
-- Each decision says how long, and over which usage, it holds (`valid`,
-- docs/policy.md): this one depends on the clock only through the night
-- boost, and on usage only through `exhausted` and the 80% mark of the
-- monthly allowance, so a CCR-U that merely reports usage is answered
-- without running it.

local MBPS = 1000000

-- The usage over which a decision holds: any amount, except that below 80%
-- of a monthly allowance it must run again when used_mb reaches 80% (the
-- quota-80 notice).
local function usage_validity(monthly)
  if monthly ~= nil and monthly.quota_mb ~= nil and (monthly.percent or 0) < 80 then
    return { monthly = { below = monthly.quota_mb * 80 // 100 }, ["*"] = "any" }
  end
  return "any"
end

-- Event-Trigger values, TS 29.212 section 5.3.7.
local RAT_CHANGE = 2
local USER_LOCATION_CHANGE = 13
local REVALIDATION_TIMEOUT = 17
local UE_IP_ADDRESS_ALLOCATE = 18
local UE_IP_ADDRESS_RELEASE = 19

-- Plans: APN-AMBR by day and by night, ARP priority of the default bearer.
local PLANS = {
  basic = { ul = 5 * MBPS, dl = 20 * MBPS, night_dl = 50 * MBPS, arp = 10, congestion_guarantee = false },
  plus = { ul = 20 * MBPS, dl = 75 * MBPS, night_dl = 150 * MBPS, arp = 9, congestion_guarantee = false },
  unlimited = { ul = 50 * MBPS, dl = 150 * MBPS, night_dl = 300 * MBPS, arp = 8, congestion_guarantee = true },
}
local DEFAULT_PLAN = "basic"
local GUEST = { ul = 1 * MBPS, dl = 2 * MBPS }
-- Fair-usage throttle once the monthly allowance is used up.
local THROTTLED = { ul = 256000, dl = 1 * MBPS }
-- The OCS policy counter (Sy) whose status "exhausted" also throttles.
local SY_COUNTER = "monthly-data"

-- Night boost window, local hours [NIGHT_START, NIGHT_END).
local NIGHT_START = 1
local NIGHT_END = 6

local ONE_DAY = 24 * 3600

-- The VIP video service: a dynamic rule with its own GBR bearer (QCI 4,
-- non-conversational video) and a higher precedence than "internet".
local VIP_RULE = "vip-video"
local function vip_rule()
  return {
    name = VIP_RULE,
    flows = {
      "permit out 17 from 198.51.100.0/24 to any",
      "permit out 17 from any to 198.51.100.0/24",
    },
    flow_status = 2, -- ENABLED
    qos = {
      qci = 4,
      arp = { priority = 5, may_preempt = false, preemptable = true },
      mbr_ul = 2 * MBPS,
      mbr_dl = 8 * MBPS,
      gbr_ul = 1 * MBPS,
      gbr_dl = 4 * MBPS,
    },
    precedence = 100,
    rating_group = 200,
    service_identifier = 2000,
    online = false,
    offline = true,
    monitoring_key = "vip",
  }
end

-- Application detection at the TDF (Sd): an ADC rule defined here.
local VIDEO_APP = "video-streaming"
local function video_adc()
  return { name = "video", application = VIDEO_APP, monitoring_key = "video" }
end

local function has(list, wanted)
  for _, v in ipairs(list) do
    if v == wanted then
      return true
    end
  end
  return false
end

local function failed(session, rule)
  for _, f in ipairs(session.rule_failures) do
    if f.rule == rule then
      return true
    end
  end
  return false
end

local function is_night(time)
  return time.hour >= NIGHT_START and time.hour < NIGHT_END
end

-- Seconds until the next night-boost boundary, so the PCEF comes back
-- (REVALIDATION_TIMEOUT) exactly when the AMBR must change.
local function secs_to_next_boundary(time)
  local now = time.hour * 60 + time.minute
  local target
  if now < NIGHT_START * 60 then
    target = NIGHT_START * 60
  elseif now < NIGHT_END * 60 then
    target = NIGHT_END * 60
  else
    target = (24 + NIGHT_START) * 60
  end
  return (target - now) * 60
end

local function default_bearer(apn, arp_priority)
  if apn == "ims" then
    -- IMS signalling: QCI 5, high ARP, never pre-empted.
    return { qci = 5, arp = { priority = 2, may_preempt = false, preemptable = false } }
  end
  return { qci = 9, arp = { priority = arp_priority, may_preempt = false, preemptable = true } }
end

local TRIGGERS = { RAT_CHANGE, USER_LOCATION_CHANGE, REVALIDATION_TIMEOUT, UE_IP_ADDRESS_ALLOCATE, UE_IP_ADDRESS_RELEASE }

function decide(input)
  local sub, session, time = input.subscriber, input.session, input.time

  if not sub.known then
    return {
      rules = { "internet" },
      base_names = { "consumer" },
      apn_ambr = { ul = GUEST.ul, dl = GUEST.dl },
      default_bearer_qos = default_bearer(session.apn, 12),
      event_triggers = { RAT_CHANGE, UE_IP_ADDRESS_ALLOCATE, UE_IP_ADDRESS_RELEASE },
      -- Reads neither the clock nor any usage, nor the installed rules.
      valid = { secs = ONE_DAY, usage = "any", installed = "any" },
    }
  end

  local attrs = sub.attributes
  if attrs.blocked == true then
    return { reject = { code = 5003, reason = "subscriber blocked" } }
  end
  if attrs.suspended == true then
    -- Unpaid bill: everything goes to the top-up portal (a predefined
    -- redirect rule at the PCEF), at a trickle.
    return {
      rules = { "redirect-topup" },
      apn_ambr = { ul = 256000, dl = 512000 },
      default_bearer_qos = default_bearer(session.apn, 12),
      event_triggers = { REVALIDATION_TIMEOUT },
      revalidation_secs = 3600,
    }
  end

  local plan = PLANS[sub.plan or DEFAULT_PLAN] or PLANS[DEFAULT_PLAN]
  local ul, dl = plan.ul, plan.dl
  if is_night(time) then
    dl = plan.night_dl
  end
  if input.network.congestion >= 2 and not plan.congestion_guarantee then
    dl = math.floor(dl / 2)
  end

  local monthly = input.usage.accumulators.monthly
  -- Tell the CRM when 80% of the monthly allowance is used: the event
  -- policy.quota-80 (docs/notifications.md) is emitted once per period of
  -- "monthly", however many updates find the usage above 80%.
  if monthly ~= nil and monthly.percent ~= nil and monthly.percent >= 80 then
    notify("quota-80", { accumulator = "monthly", percent = monthly.percent })
  end
  local spending = input.spending or {}
  local throttled = (monthly ~= nil and monthly.exhausted)
    or spending[SY_COUNTER] == "exhausted"
  local rule = "internet"
  if throttled then
    rule = "throttled"
    ul, dl = THROTTLED.ul, THROTTLED.dl
  end

  local decision = {
    rules = { rule },
    base_names = { "consumer" },
    definitions = {},
    apn_ambr = { ul = ul, dl = dl },
    default_bearer_qos = default_bearer(session.apn, plan.arp),
    event_triggers = TRIGGERS,
    revalidation_secs = secs_to_next_boundary(time),
    monitoring = { "total" },
    -- Holds until the next night-boost boundary. Of the usage it reads
    -- `exhausted` (and the Sy status), which the server still compares, so
    -- running out of allowance (or a top-up, or the monthly reset) still
    -- decides again at once; and the monthly percentage, for the 80%
    -- notice: below 80% the decision holds only while used_mb stays below
    -- that mark. It never reads the installed rules, so the update after
    -- the rules it installed are in place still finds it valid.
    valid = {
      secs = secs_to_next_boundary(time),
      usage = usage_validity(monthly),
      installed = "any",
    },
  }
  if sub.known then
    decision.spending_counters = { SY_COUNTER }
  end

  if has(sub.services, "vip") then
    if failed(session, VIP_RULE) then
      -- The PCEF could not install it (e.g. no GBR resources): do not retry
      -- on every update; it comes back with the next session.
      log("vip rule failed at " .. session.pcef .. ", not reinstalled")
    else
      decision.definitions[#decision.definitions + 1] = vip_rule()
      decision.monitoring[#decision.monitoring + 1] = "vip"
    end
  end

  if has(sub.services, "video-detect") then
    decision.adc = { video_adc() }
    if has(input.applications, VIDEO_APP) then
      decision.rules[#decision.rules + 1] = "video-optimized"
    end
  end

  return decision
end
