"""Campaign spending custody: store (locked, atomic), budget arithmetic (pure), key meter, observation.

How a launcher wires them (B = --meter-blindness-sec):

    meter = KeyMeter(base_url, key)                        # key from the environment, in memory only
    known = read_campaign(path)                            # unlocked peek: the floor for the startup read
    startup = MeterObserver(read=meter.read_usage, save=lambda u, at: None,
                            last_accepted=lambda: known.last_usage if known else None).observe(
                                clock.monotonic() + B, phase=MeterPhase.STARTUP)
    with open_campaign(store, key_fingerprint=..., ceiling=..., prior_spend=...,
                       startup_usage=startup.usage, create_if_missing=True) as campaign:
        admission_check(campaign.record.spending(), reserve_usd=..., limit_remaining=startup.limit_remaining)
        schedule = MeterSchedule(B, anchor=startup.request_time)   # saved by open_campaign
        campaign.start_run(...); spawn the runner; campaign.set_runner_pgid(pgid)
        poll = MeterObserver(read=meter.read_usage, save=campaign.record_usage,
                             last_accepted=lambda: campaign.record.last_usage, on_observation=log)
        loop: reading = poll.observe(schedule.deadline); schedule.accept(reading)
              stop_decision(campaign.record.spending(), reserve_usd=..., run_budget_usd=...,
                            limit_remaining=reading.limit_remaining)
              stop if schedule.expired(now); else wait schedule.next_wait(now)
        final settlement: poll.observe(now + B, phase=MeterPhase.FINAL), then campaign.finish_run(...)

MeterBlind → budget_meter_unavailable; CampaignPersistenceError → campaign_persistence_failed.
"""
