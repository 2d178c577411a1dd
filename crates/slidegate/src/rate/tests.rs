use super::*;

fn rate(s: &str) -> Rate {
    s.parse().unwrap()
}

#[test]
fn parses_the_documented_forms() {
    assert_eq!(
        rate("100/1m"),
        Rate::new(100, Duration::from_secs(60)).unwrap()
    );
    assert_eq!(rate("10/s"), Rate::new(10, Duration::from_secs(1)).unwrap());
    assert_eq!(
        rate("5000/1h"),
        Rate::new(5000, Duration::from_secs(3600)).unwrap()
    );
    assert_eq!(
        rate("3/250ms"),
        Rate::new(3, Duration::from_millis(250)).unwrap()
    );
    assert_eq!(
        rate("1000/1d"),
        Rate::new(1000, Duration::from_secs(86_400)).unwrap()
    );
    assert_eq!(rate("100/minute"), rate("100/1m"));
    assert_eq!(rate("100/2 minutes"), rate("100/120s"));
    assert_eq!(rate(" 7 / 90s "), rate("7/90s"));
}

#[test]
fn display_round_trips_and_is_shortest() {
    for s in [
        "100/1m", "10/1s", "3/250ms", "1000/1d", "7/90s", "5/1500us", "1/36h",
    ] {
        assert_eq!(rate(s).to_string(), s);
        assert_eq!(rate(&rate(s).to_string()), rate(s));
    }
    assert_eq!(rate("10/s").to_string(), "10/1s");
    assert_eq!(rate("1/60s").to_string(), "1/1m");
}

#[test]
fn rejects_zero_limit_zero_window_garbage_and_overflow() {
    for bad in [
        "0/1s",
        "10/0s",
        "10/0ms",
        "abc",
        "10",
        "/1s",
        "10/",
        "10/1x",
        "-1/1s",
        "1.5/1s",
        "10/1.5s",
        "99999999999999999999999/1s",
        "10/99999999999999999999d",
        "10/99999999999999d",
        "10/500us",
        "1000000000001/1s",
    ] {
        let err = bad.parse::<Rate>().unwrap_err();
        assert!(matches!(err, Error::InvalidRate { .. }), "{bad}: {err:?}");
    }
}

#[test]
fn new_checks_bounds_with_typed_errors() {
    assert!(matches!(
        Rate::new(0, Duration::from_secs(1)),
        Err(Error::InvalidLimit { got: 0, .. })
    ));
    assert!(matches!(
        Rate::new(1, Duration::from_micros(999)),
        Err(Error::InvalidWindow { .. })
    ));
    assert!(Rate::new(Rate::MAX_LIMIT, Rate::MAX_WINDOW).is_ok());
}

#[test]
fn rule_display_names_non_default_algorithms() {
    let rule = Rule::parse("10/s").unwrap();
    assert_eq!(rule.to_string(), "10/1s");
    assert_eq!(
        rule.with_algorithm(Algorithm::Gcra).to_string(),
        "10/1s gcra"
    );
}

#[test]
fn options_leave_the_state_alone_and_are_bounded() {
    let rule = Rule::parse("5/15m").unwrap();
    let login = rule.block_for(Duration::from_secs(3600)).unwrap();
    assert_eq!(login.block(), Some(Duration::from_secs(3600)));
    assert!(!login.reports());
    assert_ne!(login, rule);
    assert!(login.same_state(&rule));
    assert_eq!(login.without_options(), rule);
    let both = login.reporting();
    assert!(both.reports() && both.block().is_some());
    assert_eq!(both.to_string(), "5/15m report block_for 1h");
    assert_eq!(
        both.block_for(Duration::ZERO).unwrap(),
        rule.reporting(),
        "a zero block takes the lockout away"
    );
    assert!(matches!(
        rule.block_for(Duration::from_micros(999)),
        Err(Error::InvalidBlock { .. })
    ));
    assert!(rule.block_for(Rate::MAX_WINDOW).is_ok());
    assert!(matches!(
        rule.block_for(Rate::MAX_WINDOW + Duration::from_secs(1)),
        Err(Error::InvalidBlock { .. })
    ));
}

#[test]
fn algorithm_names_round_trip() {
    for a in Algorithm::ALL {
        assert_eq!(a.name().parse::<Algorithm>().unwrap(), a);
    }
    assert!(matches!(
        "leaky".parse::<Algorithm>(),
        Err(Error::UnknownAlgorithm(_))
    ));
}

#[test]
fn a_burst_belongs_to_gcra_and_is_bounded() {
    let gcra = Rule::parse("10/1s")
        .unwrap()
        .with_algorithm(Algorithm::Gcra);
    let bucket = gcra.with_burst(50).unwrap();
    assert_eq!((bucket.limit(), bucket.burst()), (10, 50));
    assert!(bucket.has_burst() && !gcra.has_burst());
    assert_eq!(bucket.max_cost(), 50);
    assert!(!bucket.same_state(&gcra), "a burst is part of the state");
    assert_eq!(bucket.without_options(), bucket);
    assert_eq!(
        gcra.with_burst(10).unwrap(),
        gcra,
        "a burst of the limit is none"
    );
    assert_eq!(gcra.burst(), 10);
    assert_eq!(bucket.with_burst(3).unwrap().max_cost(), 3);
    assert!(
        !bucket.with_algorithm(Algorithm::SlidingLog).has_burst(),
        "another algorithm drops it"
    );
    for (rule, burst) in [
        (Rule::parse("10/1s").unwrap(), 50),
        (gcra.with_algorithm(Algorithm::FixedWindow), 50),
        (gcra, 0),
        (gcra, Rate::MAX_LIMIT + 1),
        // Refilling 10^10 at 10/s takes 31 years.
        (gcra, 10_000_000_000),
    ] {
        assert!(
            matches!(rule.with_burst(burst), Err(Error::InvalidBurst { got, .. }) if got == burst),
            "{rule} burst {burst}"
        );
    }
    // Ten years to refill is the most.
    let slow = Rule::parse("1/1d").unwrap().with_algorithm(Algorithm::Gcra);
    assert!(slow.with_burst(3650).is_ok());
    assert!(slow.with_burst(3651).is_err());
}

#[test]
fn the_rule_grammar_reads_what_display_writes() {
    for text in [
        "100/1m",
        "10/1s gcra",
        "10/1s gcra burst 50",
        "5/15m report block_for 1h",
        "10/1s gcra burst 3 report block_for 250ms",
        "7/90s sliding_counter",
    ] {
        let rule = Rule::parse(text).unwrap();
        assert_eq!(rule.to_string(), text);
        assert_eq!(text.parse::<Rule>().unwrap(), rule);
    }
    let bucket = Rule::parse("10/1s")
        .unwrap()
        .with_algorithm(Algorithm::Gcra)
        .with_burst(50)
        .unwrap();
    assert_eq!(
        Rule::parse("10/1s burst 50").unwrap(),
        bucket,
        "burst alone is gcra"
    );
    assert_eq!(Rule::parse(" 10/1s   burst 50 gcra ").unwrap(), bucket);
    assert_eq!(
        Rule::parse("100/2 minutes report").unwrap(),
        Rule::parse("100/2m").unwrap().reporting()
    );
    assert!(matches!(
        Rule::parse("10/1s fixed_window burst 50"),
        Err(Error::InvalidBurst { got: 50, .. })
    ));
    for bad in [
        "10/1s burst",
        "10/1s burst fifty",
        "10/1s burst -1",
        "10/1s burst 5 burst 6",
        "10/1s gcra gcra",
        "10/1s report report",
        "10/1s block_for",
        "10/1s block_for 0s",
        "10/1s block_for soon",
        "10/1s gcra leaky",
        "ten/1s gcra",
        "gcra",
    ] {
        assert!(
            matches!(Rule::parse(bad), Err(Error::InvalidRule { .. })),
            "{bad}: {:?}",
            Rule::parse(bad)
        );
    }
    assert!(matches!(Rule::parse("abc"), Err(Error::InvalidRate { .. })));
}
